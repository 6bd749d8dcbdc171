-- 13: a paired user is told when the admin approves them.

ALTER TABLE pairings ADD COLUMN chat_id TEXT;
ALTER TABLE pairings ADD COLUMN welcomed_at DOUBLE PRECISION;
CREATE INDEX pairings_unwelcomed ON pairings(provider)
    WHERE status = 'approved' AND welcomed_at IS NULL AND chat_id IS NOT NULL;
