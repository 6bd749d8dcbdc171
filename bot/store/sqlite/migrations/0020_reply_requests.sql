-- 20: a reply names the request it answers. Whose a reply is (history search: a group member
-- reads back the replies to their own requests) was "whoever wrote last before it", so a reply
-- written while someone else spoke was credited to them. Replies stored before this learn it
-- from their context snapshot, where there is one.

ALTER TABLE messages ADD COLUMN request_id INTEGER;
UPDATE messages SET request_id = s.request_message_id FROM context_snapshots s
    WHERE s.reply_message_id = messages.id AND messages.role = 'assistant';
