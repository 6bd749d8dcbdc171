-- 25: what the usage sums group by, kept beside each call instead of worked out from its session
-- key at every read (`usage_summed`), and the month's calls read from one index alone.
--
-- `agent` is the session key's second `:`-separated part when the key begins with `agent:`
-- (`agent:<id>:<provider>:...`), NULL otherwise; `provider` its third part, NULL when it has
-- fewer than three. Generated columns: every writer (a turn's commit, a single call, a bulk copy,
-- which leaves them out) gets them without naming them, and rows already stored have them. SQLite
-- adds only VIRTUAL ones by ALTER TABLE; the index below stores their values.

ALTER TABLE model_usage ADD COLUMN agent TEXT GENERATED ALWAYS AS (
    CASE WHEN substr(session_key, 1, 6) = 'agent:'
         THEN substr(session_key, 7, instr(substr(session_key, 7) || ':', ':') - 1) END
) VIRTUAL;

ALTER TABLE model_usage ADD COLUMN provider TEXT GENERATED ALWAYS AS (
    CASE WHEN session_key LIKE '%:%:%'
         THEN substr(session_key,
                     instr(session_key, ':') + instr(substr(session_key, instr(session_key, ':') + 1), ':') + 1,
                     instr(substr(session_key, instr(session_key, ':')
                                  + instr(substr(session_key, instr(session_key, ':') + 1), ':') + 1) || ':',
                           ':') - 1) END
) VIRTUAL;

-- Starts with created_at, so it serves every read the index it replaces served (a window's calls),
-- and holds what the sums read, so the window's calls need no table row.
DROP INDEX model_usage_time;
CREATE INDEX model_usage_sums ON model_usage(created_at, agent, provider, user_id, model, kind,
    input_tokens, output_tokens, cache_write_tokens, cache_read_tokens);
