-- 19: the session/origin index carries each message's token estimate (see SQLite's migration of this number): the
-- compaction check sums the uncompacted history's tokens by an index-only scan.

DROP INDEX messages_session_origin;
CREATE INDEX messages_session_origin ON messages(session_key, origin, id) INCLUDE (token_estimate);
