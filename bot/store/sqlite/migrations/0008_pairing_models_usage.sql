-- 8: pairing, per-session models and usage. A stranger's pairing request (a short code, pending
-- until an admin approves or denies it; an approval lets the user in at once and for good); the
-- model a session switched to with /model; one row per model call with its tokens (cache writes
-- and reads apart), kept apart from messages so pruning history never changes what was spent.

CREATE TABLE pairings (
    provider     TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied')),
    code         TEXT,
    user_name    TEXT,
    requested_at REAL NOT NULL,
    expires_at   REAL,
    -- The last notice sent to the user (at most one an hour).
    notified_at  REAL,
    decided_at   REAL,
    PRIMARY KEY (provider, user_id)
) WITHOUT ROWID;
CREATE INDEX pairings_code ON pairings(code) WHERE status = 'pending';

CREATE TABLE session_models (
    session_key TEXT PRIMARY KEY,
    -- The name chosen from [anthropic.models] (resolved to a model id at each turn).
    model       TEXT NOT NULL,
    set_by      TEXT,
    set_at      REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE model_usage (
    id                 INTEGER PRIMARY KEY,
    session_key        TEXT NOT NULL,
    user_id            TEXT,
    -- 'reply', 'triage', 'compaction' or 'scheduled'.
    kind               TEXT NOT NULL,
    model              TEXT NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    created_at         REAL NOT NULL
);
CREATE INDEX model_usage_time ON model_usage(created_at);
CREATE INDEX model_usage_session ON model_usage(session_key, created_at);
