"""The shape of a migrated schema, read from each backend's catalog in one vocabulary: tables,
columns (name, nullability, type family), indexes (name, columns, unique, partial), constraints
(primary keys, unique keys, foreign keys with their delete action, the number of checks per table)
and triggers (table, timing, event), as sets of tuples that compare across SQLite and PostgreSQL."""

from __future__ import annotations

import re
from typing import Any

from bot.store import Store
from tests.sql import rows

Shape = dict[str, set[tuple[Any, ...]]]

_FAMILIES = {
    "integer": "int", "bigint": "int", "smallint": "int",
    "real": "float", "double precision": "float",
    "text": "text", "character varying": "text",
    "blob": "bytes", "bytea": "bytes",
    "boolean": "bool",
}


def family(declared: str) -> str:
    """A declared type's family: int, float, text, bytes (or the type itself when unknown)."""
    name = declared.strip().lower()
    return _FAMILIES.get(name, name)


async def sqlite_shape(store: Store) -> Shape:
    """The shape of an SQLite store's schema (FTS5's virtual table and its shadow tables included
    as tables: the comparison names them)."""
    tables = [str(r[0]) for r in await rows(store, "SELECT name FROM sqlite_master WHERE type = 'table' "
                                                    "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    shape: Shape = {part: set() for part in ("tables", "columns", "indexes", "constraints", "triggers")}
    for table in tables:
        shape["tables"].add((table,))
        # table_xinfo: generated columns too (hidden 2 and 3), as PostgreSQL's catalog lists them.
        info = await rows(store, "SELECT name, type, \"notnull\", pk FROM pragma_table_xinfo(?) "
                                 "WHERE hidden != 1", (table,))
        for name, declared, notnull, pk in info:
            shape["columns"].add((table, name, bool(notnull or pk), family(declared)))
        keys = sorted((pk, name) for name, _, _, pk in info if pk)
        if keys:
            shape["constraints"].add((table, "primary key", tuple(name for _, name in keys)))
        for name, unique, origin, partial in await rows(
                store, "SELECT name, \"unique\", origin, partial FROM pragma_index_list(?)", (table,)):
            columns = tuple(str(r[0]) for r in await rows(
                store, "SELECT name FROM pragma_index_info(?) ORDER BY seqno", (name,)))
            if origin == "c":
                shape["indexes"].add((table, name, columns, bool(unique), bool(partial)))
            elif origin == "u":
                shape["constraints"].add((table, "unique", columns))
        fks: dict[int, list[Any]] = {}
        for fk_id, _, parent, column, to, _, on_delete, _ in await rows(
                store, "SELECT * FROM pragma_foreign_key_list(?) ORDER BY id, seq", (table,)):
            fks.setdefault(fk_id, []).append((parent, column, to, on_delete))
        for parts in fks.values():
            shape["constraints"].add((table, "foreign key", tuple(p[1] for p in parts), parts[0][0],
                                      tuple(p[2] or "id" for p in parts), parts[0][3].lower()))
        (sql,) = [r[0] for r in await rows(store, "SELECT sql FROM sqlite_master WHERE name = ?", (table,))]
        checks = len(re.findall(r"\bCHECK\s*\(", re.sub(r"--[^\n]*", "", sql or ""), re.IGNORECASE))
        if checks:
            shape["constraints"].add((table, "checks", checks))
    for table, sql in await rows(store, "SELECT tbl_name, sql FROM sqlite_master WHERE type = 'trigger'"):
        timing, event = re.search(r"\b(BEFORE|AFTER|INSTEAD OF)\s+(INSERT|UPDATE|DELETE)\b", sql,
                                  re.IGNORECASE).groups()  # type: ignore[union-attr]
        shape["triggers"].add((str(table), timing.lower(), event.lower()))
    return shape


async def postgres_shape(store: Store) -> Shape:
    """The shape of a PostgreSQL store's schema (the current schema's tables)."""
    shape: Shape = {part: set() for part in ("tables", "columns", "indexes", "constraints", "triggers")}
    for (table,) in await rows(store, "SELECT table_name FROM information_schema.tables "
                                      "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"):
        shape["tables"].add((str(table),))
    for table, name, nullable, declared in await rows(
            store, "SELECT table_name, column_name, is_nullable, data_type FROM information_schema.columns "
                   "WHERE table_schema = current_schema()"):
        shape["columns"].add((str(table), str(name), nullable == "NO", family(str(declared))))
    for table, name, unique, partial, columns in await rows(
            store, "SELECT t.relname, i.relname, x.indisunique, x.indpred IS NOT NULL, "
                   "ARRAY(SELECT a.attname FROM unnest(x.indkey) WITH ORDINALITY AS k(attnum, n) "
                   "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum ORDER BY k.n) "
                   "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                   "JOIN pg_class t ON t.oid = x.indrelid "
                   "JOIN pg_namespace s ON s.oid = t.relnamespace WHERE s.nspname = current_schema() "
                   "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)"):
        shape["indexes"].add((str(table), str(name), tuple(columns), bool(unique), bool(partial)))
    actions = {"a": "no action", "r": "restrict", "c": "cascade", "n": "set null", "d": "set default"}
    checks: dict[str, int] = {}
    for table, kind, columns, parent, to, on_delete in await rows(
            store, "SELECT t.relname, c.contype, "
                   "ARRAY(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
                   "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum ORDER BY k.n), "
                   "p.relname, ARRAY(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, n) "
                   "JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum ORDER BY k.n), "
                   "c.confdeltype FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid "
                   "LEFT JOIN pg_class p ON p.oid = c.confrelid "
                   "JOIN pg_namespace s ON s.oid = t.relnamespace "
                   "WHERE s.nspname = current_schema()"):
        if kind == "p":
            shape["constraints"].add((str(table), "primary key", tuple(columns)))
        elif kind == "u":
            shape["constraints"].add((str(table), "unique", tuple(columns)))
        elif kind == "f":
            shape["constraints"].add((str(table), "foreign key", tuple(columns), str(parent), tuple(to),
                                      actions[str(on_delete)]))
        elif kind == "c":
            checks[str(table)] = checks.get(str(table), 0) + 1
    shape["constraints"] |= {(table, "checks", count) for table, count in checks.items()}
    for table, timing, event in await rows(
            store, "SELECT event_object_table, action_timing, event_manipulation "
                   "FROM information_schema.triggers WHERE trigger_schema = current_schema()"):
        shape["triggers"].add((str(table), str(timing).lower(), str(event).lower()))
    return shape
