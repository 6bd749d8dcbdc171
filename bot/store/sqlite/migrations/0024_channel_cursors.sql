-- 24: where a channel's intake stands at a platform that keeps no offset for it (Matrix's sync
-- token, `next_batch`): read at start, written only once the events it delivered are stored.

CREATE TABLE channel_cursors (
    provider   TEXT PRIMARY KEY,
    cursor     TEXT NOT NULL,
    updated_at REAL NOT NULL
);
