"""Numbered schema migrations, applied in order on open and recorded; append-only, never edited."""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # 1: sessions, messages, provider message ids, context snapshots.
    """
    CREATE TABLE sessions (
        key           TEXT PRIMARY KEY,
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL,
        message_count INTEGER NOT NULL DEFAULT 0,
        user_turns    INTEGER NOT NULL DEFAULT 0,
        -- /reset moves this floor: context reads only messages with a larger id.
        context_floor INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_updated ON sessions(updated_at);

    CREATE TABLE messages (
        id                  INTEGER PRIMARY KEY,
        session_key         TEXT NOT NULL REFERENCES sessions(key),
        role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        origin              TEXT NOT NULL CHECK (origin IN ('interactive', 'scheduled')),
        sender_id           TEXT,
        sender_name         TEXT,
        text                TEXT NOT NULL,
        provider_message_id TEXT,
        reply_to_id         TEXT,
        actions             TEXT,
        job_id              TEXT,
        created_at          REAL NOT NULL,
        token_estimate      INTEGER NOT NULL
    );
    -- Every context read is a range scan on this index, newest first: cost does not grow with
    -- the number of stored messages.
    CREATE INDEX messages_session_origin ON messages(session_key, origin, id);
    -- Admin reads (history) and /reset, across every origin.
    CREATE INDEX messages_session ON messages(session_key, id);

    -- Every platform id a message was received or sent as: idempotent inbound, reply-to lookup.
    CREATE TABLE provider_messages (
        provider            TEXT NOT NULL,
        chat_id             TEXT NOT NULL,
        provider_message_id TEXT NOT NULL,
        message_id          INTEGER NOT NULL REFERENCES messages(id),
        PRIMARY KEY (provider, chat_id, provider_message_id)
    ) WITHOUT ROWID;
    CREATE INDEX provider_messages_message ON provider_messages(message_id);

    CREATE TABLE context_snapshots (
        id                 INTEGER PRIMARY KEY,
        session_key        TEXT NOT NULL REFERENCES sessions(key),
        request_message_id INTEGER NOT NULL REFERENCES messages(id),
        reply_message_id   INTEGER REFERENCES messages(id),
        created_at         REAL NOT NULL,
        hash               TEXT NOT NULL,
        snapshot           TEXT NOT NULL
    );
    CREATE INDEX context_snapshots_session ON context_snapshots(session_key, id);
    """,
    # 2: which stored requests still wait for their turn, so a redelivered update is answered
    # once after a crash instead of being dropped as a duplicate.
    """
    ALTER TABLE messages ADD COLUMN awaiting_reply INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX messages_awaiting ON messages(id) WHERE awaiting_reply = 1;
    """,
    # 3: one row per scheduled time of each job (and per manual run), so a run is never delivered
    # twice, restarts know what they missed, and admins can see what happened.
    """
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
    """,
    # 4: long conversations. A full-text index over every message's text (kept in sync by
    # triggers, so any write or delete path keeps it true) lets context recall old messages by
    # their words; compaction records hold the summary of a session's older part.
    """
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        text, content='messages', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2'
    );
    INSERT INTO messages_fts (rowid, text) SELECT id, text FROM messages;
    CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END;
    CREATE TRIGGER messages_fts_update AFTER UPDATE OF text ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
    END;

    CREATE TABLE compactions (
        id                    INTEGER PRIMARY KEY,
        session_key           TEXT NOT NULL REFERENCES sessions(key),
        summary               TEXT NOT NULL,
        -- Messages up to last_summarised_id are in the summary; context reads from first_kept on.
        last_summarised_id    INTEGER NOT NULL,
        first_kept_message_id INTEGER NOT NULL,
        tokens_before         INTEGER NOT NULL,
        tokens_after          INTEGER NOT NULL,
        model                 TEXT NOT NULL,
        created_at            REAL NOT NULL,
        -- Whether the people in the chat were told (once) that it was compacted.
        notified              INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX compactions_session ON compactions(session_key, id);
    """,
    # 5: nothing lost, nothing twice. Where each inbound message came from (so a restart can answer
    # it without the platform delivering it again) and why a request was never answered; an outbox
    # of replies not yet fully delivered (a row per reply, gone once every chunk is sent); chat
    # commands waiting in their session's queue; updates that could not be parsed, kept raw.
    """
    ALTER TABLE messages ADD COLUMN chat_id TEXT;
    ALTER TABLE messages ADD COLUMN thread_id TEXT;
    -- 'late' (older than max_reply_age when the daemon could answer it) or 'stopped' (/stop).
    ALTER TABLE messages ADD COLUMN unanswered TEXT;

    CREATE TABLE outbox (
        message_id  INTEGER PRIMARY KEY REFERENCES messages(id),
        provider    TEXT NOT NULL,
        chat_id     TEXT NOT NULL,
        thread_id   TEXT,
        reply_to_id TEXT,
        -- What is sent: the stored reply, plus any one-time note that is not conversation.
        text        TEXT NOT NULL,
        chunks_sent INTEGER NOT NULL DEFAULT 0,
        created_at  REAL NOT NULL
    );

    CREATE TABLE chat_commands (
        id                  INTEGER PRIMARY KEY,
        session_key         TEXT NOT NULL,
        provider            TEXT NOT NULL,
        chat_id             TEXT NOT NULL,
        thread_id           TEXT,
        sender_id           TEXT NOT NULL,
        sender_name         TEXT NOT NULL,
        provider_message_id TEXT,
        command             TEXT NOT NULL,
        text                TEXT NOT NULL,
        sent_at             REAL,
        received_at         REAL NOT NULL,
        -- The newest message id when it arrived: it runs after that message's turn, before later ones.
        after_message_id    INTEGER NOT NULL,
        status              TEXT NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'done', 'late')),
        UNIQUE (provider, chat_id, provider_message_id)
    );
    CREATE INDEX chat_commands_pending ON chat_commands(id) WHERE status = 'pending';

    CREATE TABLE quarantine (
        id          INTEGER PRIMARY KEY,
        provider    TEXT NOT NULL,
        -- The platform's name for it where it has one (a Telegram update id).
        ref         TEXT,
        raw         TEXT NOT NULL,
        error       TEXT NOT NULL,
        received_at REAL NOT NULL
    );
    """,
    # 6: context that finds what the question needs. Lexical recall gets postings of its own per
    # session: each interactive message's terms (stems, each prefixed with its session's tag, written
    # by `bot.lexical`), so a term's postings hold one session's messages and a search never walks
    # another session's matches; the shared index of migration 4 goes. Sentence embeddings of
    # interactive messages (the optional semantic extra) are kept per message, searched within the
    # session. The fallback reply sent when the model could not answer is marked, so it is shown and
    # delivered but never sent back to the model as something the agent said.
    """
    DROP TRIGGER messages_fts_insert;
    DROP TRIGGER messages_fts_delete;
    DROP TRIGGER messages_fts_update;
    DROP TABLE messages_fts;

    CREATE TABLE recall_terms (
        message_id INTEGER PRIMARY KEY,
        terms      TEXT NOT NULL
    );
    CREATE VIRTUAL TABLE recall_fts USING fts5(
        terms, content='recall_terms', content_rowid='message_id', tokenize='unicode61', detail='none'
    );
    CREATE TRIGGER recall_terms_insert AFTER INSERT ON recall_terms BEGIN
        INSERT INTO recall_fts (rowid, terms) VALUES (new.message_id, new.terms);
    END;
    CREATE TRIGGER recall_terms_delete AFTER DELETE ON recall_terms BEGIN
        INSERT INTO recall_fts (recall_fts, rowid, terms) VALUES ('delete', old.message_id, old.terms);
    END;

    -- Clustered by session: a search reads one contiguous range (a session's first search at 1 M
    -- vectors takes ~1 ms instead of ~7 ms of scattered row reads). One vector per message.
    CREATE TABLE embeddings (
        session_key TEXT NOT NULL,
        model       TEXT NOT NULL,
        message_id  INTEGER NOT NULL,
        vector      BLOB NOT NULL,
        PRIMARY KEY (session_key, model, message_id)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX embeddings_message ON embeddings(message_id);

    -- Whatever path deletes a message (prune, an admin with the sqlite3 shell) takes its index
    -- rows with it; a message whose text changes is indexed again by its writer.
    CREATE TRIGGER messages_index_delete AFTER DELETE ON messages BEGIN
        DELETE FROM recall_terms WHERE message_id = old.id;
        DELETE FROM embeddings WHERE message_id = old.id;
    END;

    -- Interactive messages stored before this migration, up to this id, still need their terms
    -- (the store writes them in batches when it opens, then deletes the row).
    CREATE TABLE index_backlog (
        name TEXT PRIMARY KEY,
        upto INTEGER NOT NULL
    );
    INSERT INTO index_backlog (name, upto)
        SELECT 'lexical', MAX(id) FROM messages WHERE origin = 'interactive' HAVING MAX(id) IS NOT NULL;

    ALTER TABLE messages ADD COLUMN fallback INTEGER NOT NULL DEFAULT 0;
    """,
    # 7: each session's vectors counted as they are written, so a search knows from one row whether
    # the vectors it holds in memory are still the table's (instead of counting the session's
    # vectors, which walks every page of them).
    """
    CREATE TABLE embedding_counts (
        session_key TEXT NOT NULL,
        model       TEXT NOT NULL,
        count       INTEGER NOT NULL,
        largest     INTEGER NOT NULL,  -- the largest id ever counted (a delete leaves it)
        total       INTEGER NOT NULL,  -- the sum of the counted ids
        PRIMARY KEY (session_key, model)
    ) WITHOUT ROWID;
    INSERT INTO embedding_counts (session_key, model, count, largest, total)
        SELECT session_key, model, COUNT(*), MAX(message_id), SUM(message_id) FROM embeddings
        GROUP BY session_key, model;
    CREATE TRIGGER embeddings_count_insert AFTER INSERT ON embeddings BEGIN
        INSERT OR IGNORE INTO embedding_counts VALUES (new.session_key, new.model, 0, 0, 0);
        UPDATE embedding_counts SET count = count + 1, largest = MAX(largest, new.message_id),
            total = total + new.message_id WHERE session_key = new.session_key AND model = new.model;
    END;
    CREATE TRIGGER embeddings_count_delete AFTER DELETE ON embeddings BEGIN
        UPDATE embedding_counts SET count = count - 1, total = total - old.message_id
            WHERE session_key = old.session_key AND model = old.model;
    END;
    CREATE TRIGGER embeddings_count_update AFTER UPDATE ON embeddings BEGIN
        UPDATE embedding_counts SET count = count - 1, total = total - old.message_id
            WHERE session_key = old.session_key AND model = old.model;
        INSERT OR IGNORE INTO embedding_counts VALUES (new.session_key, new.model, 0, 0, 0);
        UPDATE embedding_counts SET count = count + 1, largest = MAX(largest, new.message_id),
            total = total + new.message_id WHERE session_key = new.session_key AND model = new.model;
    END;
    """,
    # 8: pairing, per-session models and usage. A stranger's pairing request (a short code, pending
    # until an admin approves or denies it; an approval lets the user in at once and for good); the
    # model a session switched to with /model; one row per model call with its tokens (cache writes
    # and reads apart), kept apart from messages so pruning history never changes what was spent.
    """
    CREATE TABLE pairings (
        provider     TEXT NOT NULL,
        user_id      TEXT NOT NULL,
        status       TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied')),
        code         TEXT,
        user_name    TEXT,
        requested_at REAL NOT NULL,
        expires_at   REAL,
        -- The last notice sent to the user (at most one an hour).
        notified_at  REAL,
        decided_at   REAL,
        PRIMARY KEY (provider, user_id)
    ) WITHOUT ROWID;
    CREATE INDEX pairings_code ON pairings(code) WHERE status = 'pending';

    CREATE TABLE session_models (
        session_key TEXT PRIMARY KEY,
        -- The name chosen from [anthropic.models] (resolved to a model id at each turn).
        model       TEXT NOT NULL,
        set_by      TEXT,
        set_at      REAL NOT NULL
    ) WITHOUT ROWID;

    CREATE TABLE model_usage (
        id                 INTEGER PRIMARY KEY,
        session_key        TEXT NOT NULL,
        user_id            TEXT,
        -- 'reply', 'triage', 'compaction' or 'scheduled'.
        kind               TEXT NOT NULL,
        model              TEXT NOT NULL,
        input_tokens       INTEGER NOT NULL,
        output_tokens      INTEGER NOT NULL,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
        created_at         REAL NOT NULL
    );
    CREATE INDEX model_usage_time ON model_usage(created_at);
    CREATE INDEX model_usage_session ON model_usage(session_key, created_at);
    """,
    # 9: pictures and files: a message's media records (kind, status, sha256 of the kept file, mime,
    # size, width, height, name, …) as a JSON list beside its text, so every read of a message
    # carries them; the files themselves live on disk by hash (`bot.media_files`). The partial
    # index finds every referenced hash without reading the whole log (`db prune`).
    """
    ALTER TABLE messages ADD COLUMN media TEXT;
    CREATE INDEX messages_with_media ON messages(id) WHERE media IS NOT NULL;
    """,
    # 10: streamed replies. The message that showed a reply while it was written (edited in place):
    # kept on the request as soon as it is posted, so a turn cut short by a crash edits it when the
    # request is answered after the restart instead of leaving half an answer; and on the outbox
    # row, so delivery edits it into the first chunk instead of posting that chunk twice.
    """
    ALTER TABLE messages ADD COLUMN preview_id TEXT;
    ALTER TABLE outbox ADD COLUMN preview_id TEXT;
    """,
    # 11: tools. Every tool call of a reply, stored as its round happens: the call (round, position,
    # name, arguments, the text the model wrote before it) before it runs, its result after, so a
    # turn cut short by a crash sends the stored rounds again instead of running a writing tool
    # twice; `reply_id` is set once the reply is stored (later turns show its `actions`, never the
    # transcript). Each user's notes (`remember`) and own timezone (`set_timezone`).
    """
    CREATE TABLE tool_calls (
        id           INTEGER PRIMARY KEY,
        session_key  TEXT NOT NULL,
        request_id   INTEGER NOT NULL,
        reply_id     INTEGER,
        round        INTEGER NOT NULL,
        position     INTEGER NOT NULL,
        tool_use_id  TEXT NOT NULL,
        name         TEXT NOT NULL,
        arguments    TEXT NOT NULL,
        round_text   TEXT,
        result       TEXT,
        summary      TEXT,
        is_error     INTEGER,
        duration_ms  REAL,
        started_at   REAL NOT NULL,
        finished_at  REAL
    );
    CREATE INDEX tool_calls_request ON tool_calls(request_id, round, position);
    CREATE INDEX tool_calls_reply ON tool_calls(reply_id);
    -- A request pruned from the log takes its tool transcript with it.
    CREATE TRIGGER tool_calls_request_delete AFTER DELETE ON messages BEGIN
        DELETE FROM tool_calls WHERE request_id = old.id;
    END;

    -- search_history: the sessions a user wrote in, without reading the whole log.
    CREATE INDEX messages_sender ON messages(sender_id, session_key) WHERE role = 'user';

    CREATE TABLE user_notes (
        id          INTEGER PRIMARY KEY,
        provider    TEXT NOT NULL,
        user_id     TEXT NOT NULL,
        note        TEXT NOT NULL,
        session_key TEXT,
        created_at  REAL NOT NULL
    );
    CREATE INDEX user_notes_user ON user_notes(provider, user_id, id);

    CREATE TABLE user_settings (
        provider   TEXT NOT NULL,
        user_id    TEXT NOT NULL,
        timezone   TEXT,
        updated_at REAL NOT NULL,
        PRIMARY KEY (provider, user_id)
    ) WITHOUT ROWID;
    """,
    # 12: reminders set by the agent's set_reminder tool: one row each, owned by the user who asked
    # and delivered to the chat (and thread) they asked in; `at` is a one-shot's time, or when a
    # recurring one (`repeat`, a cron line in `timezone`) starts counting. Each firing is a
    # schedule run of job `reminder:<id>`, so it is claimed, stored and delivered as briefings are.
    # No foreign key to the request: pruning old conversation must never be blocked by one.
    """
    CREATE TABLE reminders (
        id                 INTEGER PRIMARY KEY,
        session_key        TEXT NOT NULL,
        provider           TEXT NOT NULL,
        chat_id            TEXT NOT NULL,
        thread_id          TEXT,
        user_id            TEXT NOT NULL,
        user_name          TEXT,
        text               TEXT NOT NULL,
        at                 REAL NOT NULL,
        repeat             TEXT,
        timezone           TEXT NOT NULL,
        status             TEXT NOT NULL CHECK (status IN ('pending', 'done', 'cancelled', 'failed')),
        created_at         REAL NOT NULL,
        request_message_id INTEGER,
        finished_at        REAL
    );
    CREATE INDEX reminders_pending ON reminders(provider, user_id) WHERE status = 'pending';
    """,
    # 13: a paired user is told when the admin approves them: the private chat their request came
    # from, and when the welcome went out there (an approval sets it back to none).
    """
    ALTER TABLE pairings ADD COLUMN chat_id TEXT;
    ALTER TABLE pairings ADD COLUMN welcomed_at REAL;
    CREATE INDEX pairings_unwelcomed ON pairings(provider)
        WHERE status = 'approved' AND welcomed_at IS NULL AND chat_id IS NOT NULL;
    """,
    # 14: each session's interactive user messages, where every turn starts.
    # Recall finds the turn of each match (the user message at or before it, the next one after)
    # with one seek here, instead of walking messages_session_origin and reading each row's role.
    """
    CREATE INDEX messages_turn_starts ON messages(session_key, id)
        WHERE origin = 'interactive' AND role = 'user';
    """,
    # 15: several daemons on one store: a lease per session (which instance runs its work now,
    # until when) and a heartbeat per instance (`switchboard status` lists those alive).
    """
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
    """,
    # 16: which instance claimed a run: on a store several daemons share, a run whose claimer is
    # alive is its claimer's to finish; one whose claimer stopped beating is taken over.
    """
    ALTER TABLE schedule_runs ADD COLUMN owner TEXT;
    """,
    # 17: nothing here. PostgreSQL's recall gets a posting table of its own (`pg_migrations`);
    # FTS5's index already is one. An empty migration has no statements: only its number is kept.
    "",
    # 18: nothing here. PostgreSQL keeps pictures and files in a table (`pg_migrations`); beside an
    # SQLite file they are files on disk (`bot.media_files`).
    "",
    # 19: the session/origin index carries each message's token estimate: whether a session is due
    # for compaction (asked after every turn) sums the uncompacted history's tokens from the index
    # alone, not from thousands of rows per turn in a long chat.
    """
    DROP INDEX messages_session_origin;
    CREATE INDEX messages_session_origin ON messages(session_key, origin, id, token_estimate);
    """,
    # 20: a reply names the request it answers. Whose a reply is (history search: a group member
    # reads back the replies to their own requests) was "whoever wrote last before it", so a reply
    # written while someone else spoke was credited to them. Replies stored before this learn it
    # from their context snapshot, where there is one.
    """
    ALTER TABLE messages ADD COLUMN request_id INTEGER;
    UPDATE messages SET request_id = s.request_message_id FROM context_snapshots s
        WHERE s.reply_message_id = messages.id AND messages.role = 'assistant';
    """,
    # 21: when a reply's send last failed for a passing reason. Until then the session's next turn
    # cannot have started; after it, that turn may have posted a preview message whose id was not
    # recorded yet, which a search for the reply's send in doubt must not take for the reply.
    """
    ALTER TABLE outbox ADD COLUMN failed_at REAL;
    """,
]
