"""What the shared store's SQL says differently on each backend, as one value per backend.

The concern modules (`leases`, `delivery`, `embeddings`, `maintenance`, …) are written once, in the
SQL both SQLite and PostgreSQL run; where a statement must differ, they read it from the store's
`dialect` instead of a subclass overriding a hook. Both values are below, side by side: a reader of
`leases` sees here what each backend does. Placeholders are not here: both take SQLite's `?` and
`?N` (`postgres.connection.translate` rewrites them once per statement text).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Dialect:
    """One backend's spelling of the statements that differ."""

    # "sqlite" or "postgres": also the folder of its numbered migrations (`bot.store.schema`).
    name: str
    # Whether several daemons may share the store (then each session's work runs under a lease,
    # `bot.intake.session_lease`).
    shared: bool
    # An SQL condition, true when the instance named by the SQL expression `{instance}` is known to
    # be gone (`leases`: its leases are then free before they expire).
    gone: str
    # The temporary table of the ids a prune deletes (`maintenance`), in the connection's own types.
    prune_ids: str
    # Every vector of a session after an id, in id order, in one row: the ids comma-separated, the
    # vectors one after another, the first one's size (?1 session, ?2 model, ?3 after id). Every
    # vector of a model has one size, checked on the total: should one differ (written by
    # something else) `vectors` reads those of the first one's size (`embeddings`).
    all_vectors: str
    vectors: str
    # The whole part of the positive SQL number `{number}`, as an integer (`usage`: a call's day).
    whole: str

    def held(self, session_column: str) -> str:
        """SQL true while the session in `session_column` has a lease unexpired at the time given
        by its one `?` and an owner not known to be gone (`leases`)."""
        return (f"EXISTS (SELECT 1 FROM session_leases l WHERE l.session_key = {session_column} "
                f"AND l.expires_at >= ? AND NOT {self.gone.format(instance='l.owner')})")


# The class of the advisory locks PostgreSQL's instances hold while they live
# (`postgres.living`; the other key is a hash of the instance's name).
LIVING_LOCKS = 0x5357_4C49

SQLITE = Dialect(
    name="sqlite",
    # One file on one host: this daemon's alone.
    shared=False,
    # One file, one host: never known; time decides.
    gone="0",
    prune_ids="CREATE TEMP TABLE IF NOT EXISTS prune_ids (id INTEGER PRIMARY KEY)",
    all_vectors=(
        "SELECT group_concat(message_id), CAST(group_concat(vector, x'') AS BLOB), "
        "(SELECT length(vector) FROM embeddings WHERE session_key = ?1 AND model = ?2 "
        "AND message_id > ?3 ORDER BY message_id LIMIT 1) FROM embeddings "
        "WHERE session_key = ?1 AND model = ?2 AND message_id > ?3"
    ),
    vectors=(
        "SELECT group_concat(message_id), CAST(group_concat(vector, x'') AS BLOB), "
        "MAX(length(vector)) FROM embeddings WHERE session_key = ?1 AND model = ?2 "
        "AND message_id > ?3 AND length(vector) = (SELECT length(vector) FROM embeddings "
        "WHERE session_key = ?1 AND model = ?2 AND message_id > ?3 ORDER BY message_id LIMIT 1)"
    ),
    # CAST truncates, which for a positive number is its floor.
    whole="CAST({number} AS INTEGER)",
)

POSTGRES = Dialect(
    name="postgres",
    # Several daemons may share the database.
    shared=True,
    # An instance that beat at least once (so it took its lock first, see `postgres.living`) and
    # holds no lock now has gone.
    gone=(
        "(EXISTS (SELECT 1 FROM instances i WHERE i.id = {instance}) AND NOT EXISTS (SELECT 1 "
        f"FROM pg_locks WHERE locktype = 'advisory' AND classid = {LIVING_LOCKS}::oid "
        "AND objid = hashtext({instance})::oid AND objsubid = 2))"
    ),
    prune_ids="CREATE TEMP TABLE IF NOT EXISTS prune_ids (id BIGINT PRIMARY KEY)",
    all_vectors=(
        "SELECT string_agg(message_id::text, ',' ORDER BY message_id), "
        "string_agg(vector, ''::bytea ORDER BY message_id), (SELECT length(vector) FROM embeddings "
        "WHERE session_key = ?1 AND model = ?2 AND message_id > ?3 ORDER BY message_id LIMIT 1) "
        "FROM embeddings WHERE session_key = ?1 AND model = ?2 AND message_id > ?3"
    ),
    vectors=(
        "SELECT string_agg(message_id::text, ',' ORDER BY message_id), "
        "string_agg(vector, ''::bytea ORDER BY message_id), MAX(length(vector)) FROM embeddings "
        "WHERE session_key = ?1 AND model = ?2 AND message_id > ?3 AND length(vector) = ("
        "SELECT length(vector) FROM embeddings WHERE session_key = ?1 AND model = ?2 "
        "AND message_id > ?3 ORDER BY message_id LIMIT 1)"
    ),
    # A cast to an integer rounds: floor first.
    whole="CAST(floor({number}) AS BIGINT)",
)
