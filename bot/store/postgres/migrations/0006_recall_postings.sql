-- 6: recall's per-session postings: each interactive message's tagged terms (`bot.ranking.lexical`) as
-- lexemes taken verbatim (array_to_tsvector: no parser, no stemming: the terms are stems
-- already), GIN-indexed. A term's postings hold one session's messages, as in SQLite's FTS5
-- table. Embeddings, the index rows a deleted message takes with it, the backlog, fallback.

CREATE TABLE recall_terms (
    message_id BIGINT PRIMARY KEY,
    terms      TEXT NOT NULL,
    tsv        tsvector GENERATED ALWAYS AS (array_to_tsvector(string_to_array(terms, ' '))) STORED
);
CREATE INDEX recall_terms_tsv ON recall_terms USING GIN (tsv);
-- bot.ranking.lexical.term_weight: BM25's idf, the same double operations in the same order.
CREATE FUNCTION recall_weight(matches BIGINT, searched BIGINT) RETURNS DOUBLE PRECISION
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT ln(1::float8 + ((searched - matches)::float8 + 0.5::float8)
                 / (matches::float8 + 0.5::float8)) $$;

CREATE TABLE embeddings (
    session_key TEXT NOT NULL,
    model       TEXT NOT NULL,
    message_id  BIGINT NOT NULL,
    vector      BYTEA NOT NULL,
    PRIMARY KEY (session_key, model, message_id)
);
CREATE UNIQUE INDEX embeddings_message ON embeddings(message_id);

CREATE FUNCTION messages_index_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM recall_terms WHERE message_id = OLD.id;
    DELETE FROM embeddings WHERE message_id = OLD.id;
    RETURN NULL;
END $$;
CREATE TRIGGER messages_index_delete AFTER DELETE ON messages
    FOR EACH ROW EXECUTE FUNCTION messages_index_delete();

CREATE TABLE index_backlog (
    name TEXT PRIMARY KEY,
    upto BIGINT NOT NULL
);
INSERT INTO index_backlog (name, upto)
    SELECT 'lexical', MAX(id) FROM messages WHERE origin = 'interactive' HAVING MAX(id) IS NOT NULL;

ALTER TABLE messages ADD COLUMN fallback INTEGER NOT NULL DEFAULT 0;
