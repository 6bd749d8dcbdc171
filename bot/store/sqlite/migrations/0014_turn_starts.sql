-- 14: each session's interactive user messages, where every turn starts.
-- Recall finds the turn of each match (the user message at or before it, the next one after)
-- with one seek here, instead of walking messages_session_origin and reading each row's role.

CREATE INDEX messages_turn_starts ON messages(session_key, id)
    WHERE origin = 'interactive' AND role = 'user';
