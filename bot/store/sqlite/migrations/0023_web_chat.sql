-- 23: the web chat (`[channels.web]`): an account's role. "admin" (every account made before)
-- gets the whole console and the chat; "chat" (`switchboard web user add NAME --chat-only`) only
-- the chat page.

ALTER TABLE web_accounts ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
