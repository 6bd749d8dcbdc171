"""Copying a whole store into another, empty one: SQLite to PostgreSQL to move a bot, PostgreSQL
to an SQLite file for a backup (`switchboard db copy`).

Every data table is copied row by row with its ids, parents before the tables that refer to them,
read from one consistent snapshot of the source and written in one transaction on the target (a
failure leaves the target as empty as it was). What the schema derives is made by the target's
own machinery as the rows arrive: recall's index from `recall_terms` (SQLite's FTS triggers,
PostgreSQL's posting triggers), then identities moved past the copied ids. Each table's rows
are counted on both sides afterwards. Kept pictures and files go through each store's
`kept_files()` (on disk beside an SQLite file, a table on PostgreSQL): each one a message refers
to, counted as "kept files".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot.core.errors import StoreError

if TYPE_CHECKING:
    from bot.store import Store

# Tables whose rows the target's triggers write while another table is copied: copied after it,
# in place of what the triggers wrote (a delete leaves `largest` where it was, so the source's
# rows are the true ones).
DERIVED = {"embedding_counts": "embeddings"}
BATCH = 5000


class TargetNotEmpty(StoreError):
    """The target already holds rows: copying into it would mix two bots' histories."""


@dataclass(frozen=True, slots=True)
class TableCount:
    """One table's rows on each side after a copy."""

    table: str
    source: int
    target: int


def copy_order(tables: Iterable[str], references: Iterable[tuple[str, str]]) -> list[str]:
    """Every table after the tables it refers to (and `DERIVED` after their base), else by name."""
    names = sorted(tables)
    needs: dict[str, set[str]] = {name: set() for name in names}
    for table, parent in references:
        if table in needs and parent in needs and parent != table:
            needs[table].add(parent)
    for derived, base in DERIVED.items():
        if derived in needs and base in needs:
            needs[derived].add(base)
    order: list[str] = []
    while needs:
        ready = [name for name in sorted(needs) if not needs[name] - set(order)]
        if not ready:
            raise StoreError(f"the foreign keys of {', '.join(sorted(needs))} form a cycle; cannot copy")
        order.append(ready[0])
        del needs[ready[0]]
    return order


async def copy_store(
    source: Store, target: Store, *, batch: int = BATCH,
    progress: Callable[[str, int], object] | None = None,
) -> list[TableCount]:
    """Copy every data table of `source` into the empty `target`; the counts of each side after.

    StoreError when the schemas differ; TargetNotEmpty when the target holds any row.
    """
    tables = await _matching_tables(source, target)
    held = {table: count for table in tables if (count := await target.table_count(table))}
    if held:
        first = sorted(held.items(), key=lambda item: (item[0] != "messages", item[0]))[:4]
        shown = ", ".join(f"{count} {table}" for table, count in first)
        raise TargetNotEmpty(f"{target.label} already holds data ({shown}{', …' if len(held) > 4 else ''}); "
                             "copy only into a new, empty database")
    order = copy_order(tables, await target.table_references())
    read: dict[str, int] = {}
    async with source.reading_snapshot(), target.bulk_load():
        for table in order:
            columns = tables[table]
            read[table] = await source.table_count(table)
            if table in DERIVED:
                await target.clear_table(table)
            written = 0
            async for rows in source.read_table(table, columns, batch):
                await target.write_rows(table, columns, rows)
                written += len(rows)
                if progress is not None:
                    progress(table, written)
        files = await copy_kept_files(source, target, progress)
    await target.after_bulk_load()
    return [TableCount(table, read[table], await target.table_count(table)) for table in order] + [files]


async def copy_kept_files(
    source: Store, target: Store, progress: Callable[[str, int], object] | None = None
) -> TableCount:
    """Every kept file a message refers to, read from the source and kept by the target: the
    source's count is those it has, the target's those it kept under the same hash."""
    found = copied = 0
    theirs, ours = source.kept_files(), target.kept_files()
    for sha256 in sorted(await source.referenced_files()):
        data = await theirs.read(sha256)
        if data is None:  # gone already (a file deleted by hand): nothing to copy, nor to miss
            continue
        found += 1
        copied += await ours.keep(data) == sha256
        if progress is not None:
            progress("kept files", found)
    return TableCount("kept files", found, copied)


async def _matching_tables(source: Store, target: Store) -> dict[str, list[str]]:
    """The target's tables and columns, once the source is known to have the same."""
    source_version, target_version = await source.schema_version(), await target.schema_version()
    if source_version != target_version:
        raise StoreError(f"{source.label} is at schema {source_version} but {target.label} at "
                         f"{target_version}; open both with the same Switchboard first")
    theirs, ours = await source.table_columns(), await target.table_columns()
    if set(theirs) != set(ours):
        differ = sorted(set(theirs) ^ set(ours))
        raise StoreError(f"the two databases do not have the same tables ({', '.join(differ)})")
    for table, columns in ours.items():
        if set(columns) != set(theirs[table]):
            differ = sorted(set(columns) ^ set(theirs[table]))
            raise StoreError(f"table {table} does not have the same columns on both sides "
                             f"({', '.join(differ)})")
    return ours
