-- 7: each session's vectors counted as they are written, so a search knows from one row whether
-- the vectors it holds in memory are still the table's (instead of counting the session's
-- vectors, which walks every page of them).

CREATE TABLE embedding_counts (
    session_key TEXT NOT NULL,
    model       TEXT NOT NULL,
    count       INTEGER NOT NULL,
    largest     INTEGER NOT NULL,  -- the largest id ever counted (a delete leaves it)
    total       INTEGER NOT NULL,  -- the sum of the counted ids
    PRIMARY KEY (session_key, model)
) WITHOUT ROWID;
INSERT INTO embedding_counts (session_key, model, count, largest, total)
    SELECT session_key, model, COUNT(*), MAX(message_id), SUM(message_id) FROM embeddings
    GROUP BY session_key, model;
CREATE TRIGGER embeddings_count_insert AFTER INSERT ON embeddings BEGIN
    INSERT OR IGNORE INTO embedding_counts VALUES (new.session_key, new.model, 0, 0, 0);
    UPDATE embedding_counts SET count = count + 1, largest = MAX(largest, new.message_id),
        total = total + new.message_id WHERE session_key = new.session_key AND model = new.model;
END;
CREATE TRIGGER embeddings_count_delete AFTER DELETE ON embeddings BEGIN
    UPDATE embedding_counts SET count = count - 1, total = total - old.message_id
        WHERE session_key = old.session_key AND model = old.model;
END;
CREATE TRIGGER embeddings_count_update AFTER UPDATE ON embeddings BEGIN
    UPDATE embedding_counts SET count = count - 1, total = total - old.message_id
        WHERE session_key = old.session_key AND model = old.model;
    INSERT OR IGNORE INTO embedding_counts VALUES (new.session_key, new.model, 0, 0, 0);
    UPDATE embedding_counts SET count = count + 1, largest = MAX(largest, new.message_id),
        total = total + new.message_id WHERE session_key = new.session_key AND model = new.model;
END;
