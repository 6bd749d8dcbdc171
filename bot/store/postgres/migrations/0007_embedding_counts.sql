-- 7: each session's vectors counted as they are written (count, largest id, sum of ids).

CREATE TABLE embedding_counts (
    session_key TEXT NOT NULL,
    model       TEXT NOT NULL,
    count       BIGINT NOT NULL,
    largest     BIGINT NOT NULL,
    total       BIGINT NOT NULL,
    PRIMARY KEY (session_key, model)
);
INSERT INTO embedding_counts (session_key, model, count, largest, total)
    SELECT session_key, model, COUNT(*), MAX(message_id), SUM(message_id)::bigint FROM embeddings
    GROUP BY session_key, model;
CREATE FUNCTION embeddings_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE embedding_counts SET count = count - 1, total = total - OLD.message_id
            WHERE session_key = OLD.session_key AND model = OLD.model;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO embedding_counts VALUES (NEW.session_key, NEW.model, 1, NEW.message_id,
            NEW.message_id)
        ON CONFLICT (session_key, model) DO UPDATE SET count = embedding_counts.count + 1,
            largest = GREATEST(embedding_counts.largest, NEW.message_id),
            total = embedding_counts.total + NEW.message_id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER embeddings_count AFTER INSERT OR UPDATE OR DELETE ON embeddings
    FOR EACH ROW EXECUTE FUNCTION embeddings_count();
