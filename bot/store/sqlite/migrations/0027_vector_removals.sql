-- 27: each session's vectors also count the ones removed (issue 38). A message deleted and the
-- next one stored under its id (SQLite hands out the largest id again when the newest message is
-- deleted) left count, largest id and sum of ids as they were, so a search took the vectors it
-- held in memory or in the session's file, the deleted message's among them, for the table's:
-- a vector then answered for a row it was not computed from. A removal now changes the count row
-- for good, and a copy read before it is never taken for the table again.

ALTER TABLE embedding_counts ADD COLUMN removed INTEGER NOT NULL DEFAULT 0;
DROP TRIGGER embeddings_count_insert;
DROP TRIGGER embeddings_count_delete;
DROP TRIGGER embeddings_count_update;
CREATE TRIGGER embeddings_count_insert AFTER INSERT ON embeddings BEGIN
    INSERT OR IGNORE INTO embedding_counts (session_key, model, count, largest, total, removed)
        VALUES (new.session_key, new.model, 0, 0, 0, 0);
    UPDATE embedding_counts SET count = count + 1, largest = MAX(largest, new.message_id),
        total = total + new.message_id WHERE session_key = new.session_key AND model = new.model;
END;
CREATE TRIGGER embeddings_count_delete AFTER DELETE ON embeddings BEGIN
    UPDATE embedding_counts SET count = count - 1, total = total - old.message_id, removed = removed + 1
        WHERE session_key = old.session_key AND model = old.model;
END;
CREATE TRIGGER embeddings_count_update AFTER UPDATE ON embeddings BEGIN
    UPDATE embedding_counts SET count = count - 1, total = total - old.message_id, removed = removed + 1
        WHERE session_key = old.session_key AND model = old.model;
    INSERT OR IGNORE INTO embedding_counts (session_key, model, count, largest, total, removed)
        VALUES (new.session_key, new.model, 0, 0, 0, 0);
    UPDATE embedding_counts SET count = count + 1, largest = MAX(largest, new.message_id),
        total = total + new.message_id WHERE session_key = new.session_key AND model = new.model;
END;
