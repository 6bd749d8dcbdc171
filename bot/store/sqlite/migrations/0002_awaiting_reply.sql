-- 2: which stored requests still wait for their turn, so a redelivered update is answered
-- once after a crash instead of being dropped as a duplicate.

ALTER TABLE messages ADD COLUMN awaiting_reply INTEGER NOT NULL DEFAULT 0;
CREATE INDEX messages_awaiting ON messages(id) WHERE awaiting_reply = 1;
