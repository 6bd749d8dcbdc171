"""The root every concern of the store stands on: its connection, its dialect, its transactions.

Each concern module (`messages`, `delivery`, `leases`, …) is a `Database` with methods of its own,
written once in the SQL both backends run; `base.Store` mixes them together. What a backend does
in code of its own (opening, transactions, recall's index, whole-table copies, integrity) is
declared here, abstract, and written in `sqlite/` and `postgres/`, side by side; what differs only
in a statement's text is the store's `dialect` (`bot.store.dialect`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from bot.store.dialect import Dialect

if TYPE_CHECKING:
    import aiosqlite

    from bot.core.messages import ChatRef
    from bot.media.files import KeptFiles
    from bot.ranking.lexical import SearchTerm

T = TypeVar("T")


def like_prefix(prefix: str) -> str:
    """A LIKE pattern (with ESCAPE '\\') matching what starts with `prefix`, taken literally."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class Database(ABC):
    """One store's connection, its dialect, and what each backend writes for itself."""

    dialect: ClassVar[Dialect]

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        # aiosqlite's connection; PostgreSQL's `PgConnection` offers the same methods the concerns
        # call (typed as aiosqlite's, so every concern is checked against one surface).
        self._conn = conn
        self.path = path

    @property
    def shared(self) -> bool:
        """Whether several daemons may share this store (then each session's work runs under a lease)."""
        return self.dialect.shared

    def _held(self, session_column: str) -> str:
        """See `Dialect.held`."""
        return self.dialect.held(session_column)

    @property
    @abstractmethod
    def label(self) -> str:
        """The database as messages name it: the file, or the server."""

    async def schema_version(self) -> int:
        async with self._conn.execute("SELECT MAX(version) FROM schema_migrations") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    async def _migrate(self) -> None:
        """Bring the schema up to date; the concerns add their own part of opening after it."""
        await self._apply_migrations()

    @abstractmethod
    async def _apply_migrations(self) -> None:
        """The backend's numbered migrations not yet applied (`bot.store.schema`)."""

    @abstractmethod
    def _transaction(self) -> AbstractAsyncContextManager[None]:
        """One transaction for the block's statements."""

    @abstractmethod
    async def _batch(self, body: Callable[[aiosqlite.Connection], Coroutine[Any, Any, T]]) -> T:
        """`body(conn)` as one transaction in as few round trips as the backend allows: it awaits
        only `conn`'s statements (on SQLite the whole body is one item of the connection's thread)."""

    @abstractmethod
    def _one_write(self) -> AbstractAsyncContextManager[None]:
        """For a write that is one statement: whatever keeps it apart from other coroutines'."""

    @abstractmethod
    async def _serialize(self, *key: str) -> None:
        """Inside a transaction that reads before it decides what to write (a limit counted, the
        latest record checked): wait for any other such transaction on the same key."""

    async def _count(self, sql: str) -> int:
        found = await self._conn.execute_fetchall(sql)
        row = next(iter(found), None)
        return int(row[0]) if row else 0

    # -- what each backend writes for itself ----------------------------------------------------

    @abstractmethod
    def kept_files(self) -> KeptFiles:
        """Where the pictures and files its messages refer to are kept."""

    @abstractmethod
    def living(self, instance: str) -> AbstractAsyncContextManager[None]:
        """Show the other instances that `instance` is alive while the block runs (and not after,
        however it ends), where the store can (`Dialect.gone`). Enter it before the first heartbeat."""

    @abstractmethod
    async def check_integrity(self) -> None:
        """StoreError naming the database when it is damaged."""

    @abstractmethod
    async def backup_to(self, target: Path) -> None:
        """Copy the whole database, consistent as of one moment, into a new file."""

    @abstractmethod
    async def foreign_key_problems(self) -> int:
        """Rows whose foreign key points nowhere; 0 in a sound database."""

    @abstractmethod
    async def _references_to_messages(self) -> list[tuple[str, str]]:
        """(table, column) of every foreign key to messages.id, except those pruning cleans up."""

    @abstractmethod
    async def record_chunk(
        self, message_id: int, chat: ChatRef, index: int, provider_message_id: str, *,
        last: bool = False,
    ) -> None:
        """One chunk of an outbox reply reached the platform as `provider_message_id`; with
        `last`, the reply's last: it leaves the outbox in the same write (`finish_delivery`)."""

    @abstractmethod
    async def _turn_rows(self, session_key: str, spans: Sequence[tuple[int, int]]) -> list[Any]:
        """(start, message columns...) of every message in the turns [start, stop), in id order."""

    @abstractmethod
    async def _optimize_recall_index(self) -> None:
        """Make recall's index quick to search after a bulk write (nothing where it always is)."""

    @abstractmethod
    async def _term_hits(self, term: SearchTerm) -> list[tuple[int]]:
        """The newest TERM_HITS messages (ids) whose postings hold the search term."""
