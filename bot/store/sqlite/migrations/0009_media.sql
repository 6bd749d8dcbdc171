-- 9: pictures and files: a message's media records (kind, status, sha256 of the kept file, mime,
-- size, width, height, name, …) as a JSON list beside its text, so every read of a message
-- carries them; the files themselves live on disk by hash (`bot.media.files`). The partial
-- index finds every referenced hash without reading the whole log (`db prune`).

ALTER TABLE messages ADD COLUMN media TEXT;
CREATE INDEX messages_with_media ON messages(id) WHERE media IS NOT NULL;
