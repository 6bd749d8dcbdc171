-- 17: recall's postings as a plain table, one row per (term, message): a term is one range read
-- on its primary key, in the index alone, whatever the planner estimates (the GIN index of 6
-- left it walking every message backwards). Bytewise ("C") order, so a prefix is a range too.
-- Written from `recall_terms` by triggers: a statement's new rows at once (COPY loads whole
-- batches), a deleted row's terms one row at a time (each is a few key lookups, so no plan can
-- turn it into a scan of the table). The tsvector and its GIN index go.

CREATE TABLE recall_postings (
    term       TEXT COLLATE "C" NOT NULL,
    message_id BIGINT NOT NULL
);
INSERT INTO recall_postings (term, message_id)
    SELECT t.term, r.message_id FROM recall_terms r
    CROSS JOIN LATERAL (SELECT DISTINCT term FROM unnest(string_to_array(r.terms, ' ')) AS u(term)
                        WHERE term <> '') AS t;
ALTER TABLE recall_postings ADD PRIMARY KEY (term, message_id);

CREATE FUNCTION recall_postings_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO recall_postings (term, message_id)
        SELECT t.term, a.message_id FROM added a
        CROSS JOIN LATERAL (SELECT DISTINCT term FROM unnest(string_to_array(a.terms, ' ')) AS u(term)
                            WHERE term <> '') AS t;
    RETURN NULL;
END $$;
CREATE TRIGGER recall_postings_insert AFTER INSERT ON recall_terms
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION recall_postings_insert();

CREATE FUNCTION recall_postings_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM recall_postings
        WHERE term = ANY (string_to_array(OLD.terms, ' ')) AND message_id = OLD.message_id;
    RETURN NULL;
END $$;
CREATE TRIGGER recall_postings_delete AFTER DELETE ON recall_terms
    FOR EACH ROW EXECUTE FUNCTION recall_postings_delete();

DROP INDEX recall_terms_tsv;
ALTER TABLE recall_terms DROP COLUMN tsv;
