-- 14 (recall turn starts): each session's interactive user messages, where every turn starts.

CREATE INDEX messages_turn_starts ON messages(session_key, id)
    WHERE origin = 'interactive' AND role = 'user';
