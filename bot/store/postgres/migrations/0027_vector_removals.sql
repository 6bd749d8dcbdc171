-- 27: each session's vectors also count the ones removed (issue 38): a copy of a session's
-- vectors read before one was removed is never taken for the table again, even when a later
-- vector brings count, largest id and sum of ids back to what they were (SQLite reuses the
-- newest message's id; a sequence set back would here).

ALTER TABLE embedding_counts ADD COLUMN removed BIGINT NOT NULL DEFAULT 0;
CREATE OR REPLACE FUNCTION embeddings_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE embedding_counts SET count = count - 1, total = total - OLD.message_id,
            removed = removed + 1
            WHERE session_key = OLD.session_key AND model = OLD.model;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO embedding_counts (session_key, model, count, largest, total, removed)
            VALUES (NEW.session_key, NEW.model, 1, NEW.message_id, NEW.message_id, 0)
        ON CONFLICT (session_key, model) DO UPDATE SET count = embedding_counts.count + 1,
            largest = GREATEST(embedding_counts.largest, NEW.message_id),
            total = embedding_counts.total + NEW.message_id;
    END IF;
    RETURN NULL;
END $$;
