-- 26: memory flushes. Before a session's older part is summarised, the agent gets one silent turn
-- to keep durable facts with `remember`, when the uncompacted history crosses each flush share of
-- the compaction trigger. A row is claimed before the turn runs: one per session, compaction cycle
-- (`cycle_start`: the message id after which the uncompacted history starts) and threshold, so a
-- restart or a second instance never runs the same flush twice. Its tokens are `model_usage` rows
-- of kind 'flush'; its reply is kept here only, never as conversation.

CREATE TABLE memory_flushes (
    id          INTEGER PRIMARY KEY,
    session_key TEXT NOT NULL REFERENCES sessions(key),
    cycle_start INTEGER NOT NULL,
    threshold   REAL NOT NULL,
    share       REAL NOT NULL,
    request_id  INTEGER NOT NULL,
    status      TEXT NOT NULL,      -- running, done, failed
    model       TEXT,
    notes       INTEGER NOT NULL DEFAULT 0,
    actions     TEXT,               -- JSON list of the tool calls' action lines
    reply       TEXT,
    error       TEXT,
    created_at  REAL NOT NULL,
    finished_at REAL,
    UNIQUE (session_key, cycle_start, threshold)
);
