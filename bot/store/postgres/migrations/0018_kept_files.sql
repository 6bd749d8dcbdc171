-- 18: kept pictures and files in the database every instance shares (SQLite keeps them on disk
-- beside its file: `bot.media.files`), so any instance reads what another one received.

CREATE TABLE kept_files (
    sha256     TEXT PRIMARY KEY,
    data       BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
