-- 6: context that finds what the question needs. Lexical recall gets postings of its own per
-- session: each interactive message's terms (stems, each prefixed with its session's tag, written
-- by `bot.ranking.lexical`), so a term's postings hold one session's messages and a search never walks
-- another session's matches; the shared index of migration 4 goes. Sentence embeddings of
-- interactive messages (the optional semantic extra) are kept per message, searched within the
-- session. The fallback reply sent when the model could not answer is marked, so it is shown and
-- delivered but never sent back to the model as something the agent said.

DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;
DROP TABLE messages_fts;

CREATE TABLE recall_terms (
    message_id INTEGER PRIMARY KEY,
    terms      TEXT NOT NULL
);
CREATE VIRTUAL TABLE recall_fts USING fts5(
    terms, content='recall_terms', content_rowid='message_id', tokenize='unicode61', detail='none'
);
CREATE TRIGGER recall_terms_insert AFTER INSERT ON recall_terms BEGIN
    INSERT INTO recall_fts (rowid, terms) VALUES (new.message_id, new.terms);
END;
CREATE TRIGGER recall_terms_delete AFTER DELETE ON recall_terms BEGIN
    INSERT INTO recall_fts (recall_fts, rowid, terms) VALUES ('delete', old.message_id, old.terms);
END;

-- Clustered by session: a search reads one contiguous range (a session's first search at 1 M
-- vectors takes ~1 ms instead of ~7 ms of scattered row reads). One vector per message.
CREATE TABLE embeddings (
    session_key TEXT NOT NULL,
    model       TEXT NOT NULL,
    message_id  INTEGER NOT NULL,
    vector      BLOB NOT NULL,
    PRIMARY KEY (session_key, model, message_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX embeddings_message ON embeddings(message_id);

-- Whatever path deletes a message (prune, an admin with the sqlite3 shell) takes its index
-- rows with it; a message whose text changes is indexed again by its writer.
CREATE TRIGGER messages_index_delete AFTER DELETE ON messages BEGIN
    DELETE FROM recall_terms WHERE message_id = old.id;
    DELETE FROM embeddings WHERE message_id = old.id;
END;

-- Interactive messages stored before this migration, up to this id, still need their terms
-- (the store writes them in batches when it opens, then deletes the row).
CREATE TABLE index_backlog (
    name TEXT PRIMARY KEY,
    upto INTEGER NOT NULL
);
INSERT INTO index_backlog (name, upto)
    SELECT 'lexical', MAX(id) FROM messages WHERE origin = 'interactive' HAVING MAX(id) IS NOT NULL;

ALTER TABLE messages ADD COLUMN fallback INTEGER NOT NULL DEFAULT 0;
