-- 5: nothing lost, nothing twice. Where each inbound message came from (so a restart can answer
-- it without the platform delivering it again) and why a request was never answered; an outbox
-- of replies not yet fully delivered (a row per reply, gone once every chunk is sent); chat
-- commands waiting in their session's queue; updates that could not be parsed, kept raw.

ALTER TABLE messages ADD COLUMN chat_id TEXT;
ALTER TABLE messages ADD COLUMN thread_id TEXT;
-- 'late' (older than max_reply_age when the daemon could answer it) or 'stopped' (/stop).
ALTER TABLE messages ADD COLUMN unanswered TEXT;

CREATE TABLE outbox (
    message_id  INTEGER PRIMARY KEY REFERENCES messages(id),
    provider    TEXT NOT NULL,
    chat_id     TEXT NOT NULL,
    thread_id   TEXT,
    reply_to_id TEXT,
    -- What is sent: the stored reply, plus any one-time note that is not conversation.
    text        TEXT NOT NULL,
    chunks_sent INTEGER NOT NULL DEFAULT 0,
    created_at  REAL NOT NULL
);

CREATE TABLE chat_commands (
    id                  INTEGER PRIMARY KEY,
    session_key         TEXT NOT NULL,
    provider            TEXT NOT NULL,
    chat_id             TEXT NOT NULL,
    thread_id           TEXT,
    sender_id           TEXT NOT NULL,
    sender_name         TEXT NOT NULL,
    provider_message_id TEXT,
    command             TEXT NOT NULL,
    text                TEXT NOT NULL,
    sent_at             REAL,
    received_at         REAL NOT NULL,
    -- The newest message id when it arrived: it runs after that message's turn, before later ones.
    after_message_id    INTEGER NOT NULL,
    status              TEXT NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'done', 'late')),
    UNIQUE (provider, chat_id, provider_message_id)
);
CREATE INDEX chat_commands_pending ON chat_commands(id) WHERE status = 'pending';

CREATE TABLE quarantine (
    id          INTEGER PRIMARY KEY,
    provider    TEXT NOT NULL,
    -- The platform's name for it where it has one (a Telegram update id).
    ref         TEXT,
    raw         TEXT NOT NULL,
    error       TEXT NOT NULL,
    received_at REAL NOT NULL
);
