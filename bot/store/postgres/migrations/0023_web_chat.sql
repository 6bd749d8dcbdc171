-- 23: the web chat: an account's role, "admin" or "chat" (see SQLite's migration of this number).

ALTER TABLE web_accounts ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
