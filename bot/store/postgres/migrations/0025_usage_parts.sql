-- 25: what the usage sums group by, kept beside each call (see SQLite's migration of this number):
-- `agent`, the session key's second part when it begins with `agent:`, `provider` its third part,
-- NULL when there is none. STORED (PostgreSQL computes them for the rows already there); the index
-- lets a window's sums be an index-only scan.

ALTER TABLE model_usage
    ADD COLUMN agent TEXT GENERATED ALWAYS AS (
        CASE WHEN substr(session_key, 1, 6) = 'agent:' THEN split_part(session_key, ':', 2) END) STORED,
    ADD COLUMN provider TEXT GENERATED ALWAYS AS (
        CASE WHEN session_key LIKE '%:%:%' THEN split_part(session_key, ':', 3) END) STORED;

DROP INDEX model_usage_time;
CREATE INDEX model_usage_sums ON model_usage(created_at, agent, provider, user_id, model, kind,
    input_tokens, output_tokens, cache_write_tokens, cache_read_tokens);
