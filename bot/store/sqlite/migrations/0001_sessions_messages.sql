-- 1: sessions, messages, provider message ids, context snapshots.

CREATE TABLE sessions (
    key           TEXT PRIMARY KEY,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0,
    user_turns    INTEGER NOT NULL DEFAULT 0,
    -- /reset moves this floor: context reads only messages with a larger id.
    context_floor INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_updated ON sessions(updated_at);

CREATE TABLE messages (
    id                  INTEGER PRIMARY KEY,
    session_key         TEXT NOT NULL REFERENCES sessions(key),
    role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    origin              TEXT NOT NULL CHECK (origin IN ('interactive', 'scheduled')),
    sender_id           TEXT,
    sender_name         TEXT,
    text                TEXT NOT NULL,
    provider_message_id TEXT,
    reply_to_id         TEXT,
    actions             TEXT,
    job_id              TEXT,
    created_at          REAL NOT NULL,
    token_estimate      INTEGER NOT NULL
);
-- Every context read is a range scan on this index, newest first: cost does not grow with
-- the number of stored messages.
CREATE INDEX messages_session_origin ON messages(session_key, origin, id);
-- Admin reads (history) and /reset, across every origin.
CREATE INDEX messages_session ON messages(session_key, id);

-- Every platform id a message was received or sent as: idempotent inbound, reply-to lookup.
CREATE TABLE provider_messages (
    provider            TEXT NOT NULL,
    chat_id             TEXT NOT NULL,
    provider_message_id TEXT NOT NULL,
    message_id          INTEGER NOT NULL REFERENCES messages(id),
    PRIMARY KEY (provider, chat_id, provider_message_id)
) WITHOUT ROWID;
CREATE INDEX provider_messages_message ON provider_messages(message_id);

CREATE TABLE context_snapshots (
    id                 INTEGER PRIMARY KEY,
    session_key        TEXT NOT NULL REFERENCES sessions(key),
    request_message_id INTEGER NOT NULL REFERENCES messages(id),
    reply_message_id   INTEGER REFERENCES messages(id),
    created_at         REAL NOT NULL,
    hash               TEXT NOT NULL,
    snapshot           TEXT NOT NULL
);
CREATE INDEX context_snapshots_session ON context_snapshots(session_key, id);
