-- 9: a message's media records (a JSON list), and the index of messages that have any.

ALTER TABLE messages ADD COLUMN media TEXT;
CREATE INDEX messages_with_media ON messages(id) WHERE media IS NOT NULL;
