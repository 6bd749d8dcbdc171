-- 12: reminders set by the agent's set_reminder tool: one row each, owned by the user who asked
-- and delivered to the chat (and thread) they asked in; `at` is a one-shot's time, or when a
-- recurring one (`repeat`, a cron line in `timezone`) starts counting. Each firing is a
-- schedule run of job `reminder:<id>`, so it is claimed, stored and delivered as briefings are.
-- No foreign key to the request: pruning old conversation must never be blocked by one.

CREATE TABLE reminders (
    id                 INTEGER PRIMARY KEY,
    session_key        TEXT NOT NULL,
    provider           TEXT NOT NULL,
    chat_id            TEXT NOT NULL,
    thread_id          TEXT,
    user_id            TEXT NOT NULL,
    user_name          TEXT,
    text               TEXT NOT NULL,
    at                 REAL NOT NULL,
    repeat             TEXT,
    timezone           TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN ('pending', 'done', 'cancelled', 'failed')),
    created_at         REAL NOT NULL,
    request_message_id INTEGER,
    finished_at        REAL
);
CREATE INDEX reminders_pending ON reminders(provider, user_id) WHERE status = 'pending';
