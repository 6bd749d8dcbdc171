-- 10: streamed replies. The message that showed a reply while it was written (edited in place):
-- kept on the request as soon as it is posted, so a turn cut short by a crash edits it when the
-- request is answered after the restart instead of leaving half an answer; and on the outbox
-- row, so delivery edits it into the first chunk instead of posting that chunk twice.

ALTER TABLE messages ADD COLUMN preview_id TEXT;
ALTER TABLE outbox ADD COLUMN preview_id TEXT;
