-- 13: a paired user is told when the admin approves them: the private chat their request came
-- from, and when the welcome went out there (an approval sets it back to none).

ALTER TABLE pairings ADD COLUMN chat_id TEXT;
ALTER TABLE pairings ADD COLUMN welcomed_at REAL;
CREATE INDEX pairings_unwelcomed ON pairings(provider)
    WHERE status = 'approved' AND welcomed_at IS NULL AND chat_id IS NOT NULL;
