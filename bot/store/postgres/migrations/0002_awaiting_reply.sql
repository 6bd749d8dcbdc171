-- 2: which stored requests still wait for their turn.

ALTER TABLE messages ADD COLUMN awaiting_reply INTEGER NOT NULL DEFAULT 0;
CREATE INDEX messages_awaiting ON messages(id) WHERE awaiting_reply = 1;
