"""After the last migration, SQLite's schema and PostgreSQL's have the same tables, columns,
indexes, constraints and triggers, but for the differences each backend's design names."""

from __future__ import annotations

from pathlib import Path

from bot.store import PostgresStore, SqliteStore
from bot.store.schema import migrations
from tests.schema_shape import Shape, postgres_shape, sqlite_shape

# Recall's index: FTS5's virtual table and its shadow tables on SQLite, a posting table on
# PostgreSQL; both written from `recall_terms` by triggers. Kept pictures and files: files on disk
# beside an SQLite database, a table in the database every PostgreSQL instance shares.
SQLITE_ONLY = {"recall_fts", "recall_fts_config", "recall_fts_data", "recall_fts_docsize", "recall_fts_idx"}
POSTGRES_ONLY = {"recall_postings", "kept_files"}


def _without(shape: Shape, tables: set[str]) -> Shape:
    return {part: {row for row in rows if row[0] not in tables} for part, rows in shape.items()}


def _tables(shape: Shape) -> set[str]:
    return {str(row[0]) for row in shape["tables"]}


def test_both_backends_number_their_migrations_alike() -> None:
    """Each backend has a file for every number, named alike (the same change in each one's terms)."""
    from importlib import resources

    def names(backend: str) -> list[str]:
        folder = resources.files(f"bot.store.{backend}").joinpath("migrations")
        return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))

    assert names("sqlite") == names("postgres")
    assert len(migrations("sqlite")) == len(names("sqlite"))


async def test_the_two_schemas_match_after_the_last_migration(pg_url: str, tmp_path: Path) -> None:
    """Tables, columns (name, nullability, type family), indexes, constraints and triggers are the
    same on both backends, the recall index and the kept files aside."""
    async with SqliteStore.open(tmp_path / "switchboard.db") as store:
        sqlite = await sqlite_shape(store)
    async with PostgresStore.connect(pg_url, state_path=tmp_path / "pg.db", label=pg_url) as store:
        postgres = await postgres_shape(store)

    assert _tables(sqlite) - _tables(postgres) == SQLITE_ONLY
    assert _tables(postgres) - _tables(sqlite) == POSTGRES_ONLY
    left, right = _without(sqlite, SQLITE_ONLY), _without(postgres, POSTGRES_ONLY)
    for part in ("tables", "columns", "indexes", "constraints", "triggers"):
        assert sorted(left[part], key=repr) == sorted(right[part], key=repr), part
    # Nothing compared is empty: a catalog read that found nothing would pass the rest.
    assert all(left[part] for part in left)
