-- 10: streamed replies: the preview message, on the request and on the outbox row.

ALTER TABLE messages ADD COLUMN preview_id TEXT;
ALTER TABLE outbox ADD COLUMN preview_id TEXT;
