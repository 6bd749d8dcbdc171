-- 22: the browser console: admin accounts, their login sessions and failed logins (see SQLite's
-- migration of this number).

CREATE TABLE web_accounts (
    name          TEXT PRIMARY KEY,
    password_hash TEXT NOT NULL,
    created_at    DOUBLE PRECISION NOT NULL,
    last_login_at DOUBLE PRECISION
);
CREATE TABLE web_sessions (
    token_hash TEXT PRIMARY KEY,
    account    TEXT NOT NULL REFERENCES web_accounts(name),
    csrf_token TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX web_sessions_account ON web_sessions(account);
CREATE TABLE web_login_failures (
    scope   TEXT NOT NULL,
    subject TEXT NOT NULL,
    at      DOUBLE PRECISION NOT NULL
);
CREATE INDEX web_login_failures_subject ON web_login_failures(scope, subject, at);
