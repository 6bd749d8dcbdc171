-- 22: the browser console (`[web]`): admin accounts (`switchboard web user add`), their login
-- sessions (stored here, so any instance on a shared store serves the pages) and failed logins
-- (counted per address and per account for the rate limit, across instances and restarts).
-- A session row holds the SHA-256 of its cookie, never the cookie: a copy of the database does
-- not log anyone in.

CREATE TABLE web_accounts (
    name          TEXT PRIMARY KEY,
    password_hash TEXT NOT NULL,
    created_at    REAL NOT NULL,
    last_login_at REAL
);
CREATE TABLE web_sessions (
    token_hash TEXT PRIMARY KEY,
    account    TEXT NOT NULL REFERENCES web_accounts(name),
    csrf_token TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX web_sessions_account ON web_sessions(account);
CREATE TABLE web_login_failures (
    scope   TEXT NOT NULL,
    subject TEXT NOT NULL,
    at      REAL NOT NULL
);
CREATE INDEX web_login_failures_subject ON web_login_failures(scope, subject, at);
