-- 21: when a reply's send last failed for a passing reason. Until then the session's next turn
-- cannot have started; after it, that turn may have posted a preview message whose id was not
-- recorded yet, which a search for the reply's send in doubt must not take for the reply.

ALTER TABLE outbox ADD COLUMN failed_at REAL;
