-- 19: the session/origin index carries each message's token estimate: whether a session is due
-- for compaction (asked after every turn) sums the uncompacted history's tokens from the index
-- alone, not from thousands of rows per turn in a long chat.

DROP INDEX messages_session_origin;
CREATE INDEX messages_session_origin ON messages(session_key, origin, id, token_estimate);
