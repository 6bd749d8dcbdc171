-- 15: several daemons on one store: a lease per session (which instance runs its work now,
-- until when) and a heartbeat per instance.

CREATE TABLE session_leases (
    session_key TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    expires_at  DOUBLE PRECISION NOT NULL
);
CREATE TABLE instances (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    seen_at    DOUBLE PRECISION NOT NULL
);
