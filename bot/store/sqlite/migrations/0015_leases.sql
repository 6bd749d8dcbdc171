-- 15: several daemons on one store: a lease per session (which instance runs its work now,
-- until when) and a heartbeat per instance (`switchboard status` lists those alive).

CREATE TABLE session_leases (
    session_key TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    expires_at  REAL NOT NULL
);
CREATE TABLE instances (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at REAL NOT NULL,
    seen_at    REAL NOT NULL
);
