-- 11: tools. Every tool call of a reply, stored as its round happens: the call (round, position,
-- name, arguments, the text the model wrote before it) before it runs, its result after, so a
-- turn cut short by a crash sends the stored rounds again instead of running a writing tool
-- twice; `reply_id` is set once the reply is stored (later turns show its `actions`, never the
-- transcript). Each user's notes (`remember`) and own timezone (`set_timezone`).

CREATE TABLE tool_calls (
    id           INTEGER PRIMARY KEY,
    session_key  TEXT NOT NULL,
    request_id   INTEGER NOT NULL,
    reply_id     INTEGER,
    round        INTEGER NOT NULL,
    position     INTEGER NOT NULL,
    tool_use_id  TEXT NOT NULL,
    name         TEXT NOT NULL,
    arguments    TEXT NOT NULL,
    round_text   TEXT,
    result       TEXT,
    summary      TEXT,
    is_error     INTEGER,
    duration_ms  REAL,
    started_at   REAL NOT NULL,
    finished_at  REAL
);
CREATE INDEX tool_calls_request ON tool_calls(request_id, round, position);
CREATE INDEX tool_calls_reply ON tool_calls(reply_id);
-- A request pruned from the log takes its tool transcript with it.
CREATE TRIGGER tool_calls_request_delete AFTER DELETE ON messages BEGIN
    DELETE FROM tool_calls WHERE request_id = old.id;
END;

-- search_history: the sessions a user wrote in, without reading the whole log.
CREATE INDEX messages_sender ON messages(sender_id, session_key) WHERE role = 'user';

CREATE TABLE user_notes (
    id          INTEGER PRIMARY KEY,
    provider    TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    note        TEXT NOT NULL,
    session_key TEXT,
    created_at  REAL NOT NULL
);
CREATE INDEX user_notes_user ON user_notes(provider, user_id, id);

CREATE TABLE user_settings (
    provider   TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    timezone   TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (provider, user_id)
) WITHOUT ROWID;
