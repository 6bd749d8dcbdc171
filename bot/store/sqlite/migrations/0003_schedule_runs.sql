-- 3: one row per scheduled time of each job (and per manual run), so a run is never delivered
-- twice, restarts know what they missed, and admins can see what happened.

CREATE TABLE schedule_runs (
    id               INTEGER PRIMARY KEY,
    job_id           TEXT NOT NULL,
    scheduled_for    REAL NOT NULL,
    -- 'schedule' (a time of the job's trigger) or 'manual' (`switchboard jobs run ID`).
    trigger          TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual')),
    status           TEXT NOT NULL CHECK (status IN ('requested', 'running', 'generated',
                         'delivered', 'quiet', 'failed', 'missed', 'stale')),
    started_at       REAL,
    finished_at      REAL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    reply_message_id INTEGER REFERENCES messages(id),
    delivered_ids    TEXT,
    error            TEXT,
    UNIQUE (job_id, scheduled_for)
);
CREATE INDEX schedule_runs_status ON schedule_runs(status) WHERE status IN ('requested', 'generated');
-- The context's scheduled block leaves out output a run did not deliver.
CREATE INDEX schedule_runs_reply ON schedule_runs(reply_message_id);
