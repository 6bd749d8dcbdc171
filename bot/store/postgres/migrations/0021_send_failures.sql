-- 21: when a reply's send last failed for a passing reason (see SQLite's migration of this number).

ALTER TABLE outbox ADD COLUMN failed_at DOUBLE PRECISION;
