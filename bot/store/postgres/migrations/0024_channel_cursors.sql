-- 24: a channel's place at a platform that keeps no offset for it (see SQLite's migration of this
-- number).

CREATE TABLE channel_cursors (
    provider   TEXT PRIMARY KEY,
    cursor     TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
