-- 4: long conversations. A full-text index over every message's text (kept in sync by
-- triggers, so any write or delete path keeps it true) lets context recall old messages by
-- their words; compaction records hold the summary of a session's older part.

CREATE VIRTUAL TABLE messages_fts USING fts5(
    text, content='messages', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
);
INSERT INTO messages_fts (rowid, text) SELECT id, text FROM messages;
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
END;

CREATE TABLE compactions (
    id                    INTEGER PRIMARY KEY,
    session_key           TEXT NOT NULL REFERENCES sessions(key),
    summary               TEXT NOT NULL,
    -- Messages up to last_summarised_id are in the summary; context reads from first_kept on.
    last_summarised_id    INTEGER NOT NULL,
    first_kept_message_id INTEGER NOT NULL,
    tokens_before         INTEGER NOT NULL,
    tokens_after          INTEGER NOT NULL,
    model                 TEXT NOT NULL,
    created_at            REAL NOT NULL,
    -- Whether the people in the chat were told (once) that it was compacted.
    notified              INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX compactions_session ON compactions(session_key, id);
