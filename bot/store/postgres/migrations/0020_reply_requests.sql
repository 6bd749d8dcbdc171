-- 20: a reply names the request it answers (see SQLite's migration of this number), learnt from the snapshots for
-- replies stored before.

ALTER TABLE messages ADD COLUMN request_id BIGINT;
UPDATE messages SET request_id = s.request_message_id FROM context_snapshots s
    WHERE s.reply_message_id = messages.id AND messages.role = 'assistant';
