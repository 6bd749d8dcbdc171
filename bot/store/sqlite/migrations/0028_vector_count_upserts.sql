-- 28: the vector counts' triggers add a session's row without a conflict. A switch of encoder
-- replaces each message's vector by an upsert (INSERT ... ON CONFLICT DO UPDATE), and inside it
-- the trigger's INSERT OR IGNORE of the new model's count row took the outer statement's conflict
-- policy instead: the second message of a session failed with "UNIQUE constraint failed:
-- embedding_counts.session_key, embedding_counts.model", and no session of several messages could
-- be embedded again. The row is now added only where it is missing.

DROP TRIGGER embeddings_count_insert;
DROP TRIGGER embeddings_count_update;
CREATE TRIGGER embeddings_count_insert AFTER INSERT ON embeddings BEGIN
    INSERT INTO embedding_counts (session_key, model, count, largest, total, removed)
        SELECT new.session_key, new.model, 0, 0, 0, 0 WHERE NOT EXISTS (SELECT 1 FROM embedding_counts
            WHERE session_key = new.session_key AND model = new.model);
    UPDATE embedding_counts SET count = count + 1, largest = MAX(largest, new.message_id),
        total = total + new.message_id WHERE session_key = new.session_key AND model = new.model;
END;
CREATE TRIGGER embeddings_count_update AFTER UPDATE ON embeddings BEGIN
    UPDATE embedding_counts SET count = count - 1, total = total - old.message_id, removed = removed + 1
        WHERE session_key = old.session_key AND model = old.model;
    INSERT INTO embedding_counts (session_key, model, count, largest, total, removed)
        SELECT new.session_key, new.model, 0, 0, 0, 0 WHERE NOT EXISTS (SELECT 1 FROM embedding_counts
            WHERE session_key = new.session_key AND model = new.model);
    UPDATE embedding_counts SET count = count + 1, largest = MAX(largest, new.message_id),
        total = total + new.message_id WHERE session_key = new.session_key AND model = new.model;
END;
