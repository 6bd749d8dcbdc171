"""`switchboard init --upgrade`: an existing config file brought up to this version's example.

Each key of the example that the file neither sets nor shows commented out is added commented
out, with the example's comment, at the end of its table in the file; a table the file lacks is
added at the end with its introduction and its keys commented out. So nothing the file means
changes: it reads as before, and a new key takes effect only once its line is uncommented. Keys
the file sets that this version does not know are named with their line (the daemon refuses them
until they are removed). The file before is kept beside it as `<name>.bak`.
"""

from __future__ import annotations

import os
import sys
import tomllib
import typing
from pathlib import Path
from types import UnionType
from typing import Any

from pydantic import BaseModel

from bot.cli.config_text import Layout, Table, general_name, layout, split_comment
from bot.config import Config, load_config
from bot.core.errors import BotError, ConfigError


def upgrade(target: Path, example: str) -> int:
    """Add the example's missing keys to `target` as comments; 0 when it loads, 2 when keys this
    version does not know remain in it."""
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(target), None, "not found: nothing to upgrade; `switchboard init` "
                                             "writes a new one") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(target), None, f"cannot be read ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(target), None, f"is not valid TOML: {exc}") from None
    new_text, added = with_missing_keys(text, example, data)
    if added:
        _replace(target, text, new_text)
        print(f"{target}: added {len(added)} key{'s' if len(added) != 1 else ''} of this version, "
              f"commented out with their defaults (uncomment one to change it); the old file is "
              f"{_backup(target).name}:")
        for table, keys in _by_table(added).items():
            print(f"  [{table}] {', '.join(keys)}")
    else:
        print(f"{target}: up to date: it has every key of this version's example.")
    unknown = unknown_keys(data)
    if unknown:
        where = layout(new_text)
        them = "them" if len(unknown) != 1 else "it"
        print(f"{target}: {len(unknown)} key{'s' if len(unknown) != 1 else ''} this version no longer "
              f"knows; remove {them}, or the daemon refuses the file:", file=sys.stderr)
        for key in unknown:
            print(f"  {key}{_line_of(where, key)}", file=sys.stderr)
        return 2
    load_config(target)  # what else the daemon would refuse, said as `check-config` says it
    return 0


def with_missing_keys(text: str, example: str, data: dict[str, Any]) -> tuple[str, list[str]]:
    """`text` with the example's keys it lacks added as comments, and those keys' names."""
    have, wanted = layout(text), layout(example)
    known = have.key_names()
    missing: dict[str, list[int]] = {}  # table -> the example's key indexes, in example order
    for index, key in enumerate(wanted.keys):
        if (key.table, key.name) not in known:
            known.add((key.table, key.name))  # once, where the example first shows it
            missing.setdefault(key.table, []).append(index)
    inserts: list[tuple[int, int, list[str]]] = []  # (line, order, lines): comments put in place
    appended: list[str] = []
    added: list[str] = []
    follows = -1  # the example's line after the last table appended
    for order, (table, indexes) in enumerate(missing.items()):
        added += [f"{table}.{wanted.keys[i].name}" for i in indexes]
        found, header = have.table(table), wanted.table(table)
        if found is not None or header is None:
            lines = [line for i in indexes for line in _commented(wanted, i)]
            inserts.append((found.end if found is not None else len(have.lines), order, lines))
            continue
        intro = wanted.intro(header)
        start = header.header - len(intro)
        parent = have.table(header.within) if header.commented else None
        if parent is not None and not parent.commented:
            # An optional block (`# [[agents]]`, `# [channels.telegram.dms."…"]`): beside the
            # table the example shows it in, spaced as there.
            gap = [] if wanted.lines[start - 1].strip() else [""]
            inserts.append((parent.end, order, [*gap, *intro, *_block(wanted, header, heading=True)]))
            continue
        # A table the file does not define gets a real header (its keys stay comments); one it
        # defines otherwise (a dotted key, an inline table) or a list's entry, a commented one.
        header_line = wanted.lines[header.header]
        if header.commented or _defined(data, table) or header_line.startswith("[["):
            header_line = header_line if header.commented else f"# {header_line}"
        # Blocks that follow each other in the example stay together (a table and its sub-tables).
        appended += [*([] if start == follows else [""]), *intro, header_line, *_block(wanted, header)]
        follows = header.end
    result = have.lines[:]
    for position, _, lines in sorted(inserts, key=lambda insert: insert[:2], reverse=True):
        result[position:position] = lines
    if appended:
        result += ["", "# Added by `switchboard init --upgrade`: tables of this version the file lacked.",
                   *(appended[1:] if appended[0] == "" else appended)]
    new_text = "\n".join(result) + "\n"
    if _pruned(tomllib.loads(new_text)) != _pruned(data):
        raise BotError("init --upgrade would change what the file means; nothing written (a bug: "
                       "please report it with the file)")
    return new_text, added


def _block(found: Layout, table: Table, *, heading: bool = False) -> list[str]:
    """A table's lines after its header (with it: `heading`), prose kept, every key commented out."""
    first = table.header if heading else table.header + 1
    lines = found.lines[first:table.end]
    for key in found.keys:
        if table.header < key.first < table.end and not key.commented:
            for number in range(key.first, key.end):
                lines[number - first] = commented_out(found.lines[number])
    return lines


def _commented(found: Layout, index: int) -> list[str]:
    key = found.keys[index]
    lines = found.lines[key.first:key.end]
    return lines if key.commented else [commented_out(line) for line in lines]


def commented_out(line: str) -> str:
    """A set line commented out as the example writes one: `# ` in front, its own comment kept in
    its column where there is room (a continuation line's too)."""
    if not line.strip() or line.startswith("  "):
        return f"#{line[1:]}" if line.startswith("  ") else line
    comment = split_comment(line.partition("=")[2])[1]
    gap = len(comment) - len(comment.lstrip())
    if comment and gap >= 4:
        return f"# {line[:len(line) - len(comment)]}{comment[2:]}"
    return f"# {line}"


def _by_table(keys: list[str]) -> dict[str, list[str]]:
    tables: dict[str, list[str]] = {}
    for dotted in keys:
        table, _, name = dotted.rpartition(".")
        tables.setdefault(table, []).append(name)
    return tables


def _defined(data: dict[str, Any], table: str) -> bool:
    node: Any = data
    for part in table.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _pruned(data: Any) -> Any:
    """Parsed TOML without its empty tables (the only thing an upgrade may add)."""
    if isinstance(data, dict):
        kept = {key: _pruned(value) for key, value in data.items()}
        return {key: value for key, value in kept.items() if value != {}}
    return data


def unknown_keys(data: dict[str, Any]) -> list[str]:
    """Keys in parsed config data that this version's Config does not have, as dotted paths."""
    return _unknown(data, Config, "")


def _unknown(data: Any, model: type[BaseModel], path: str) -> list[str]:
    if not isinstance(data, dict):
        return []
    found = []
    for key, value in data.items():
        dotted = f"{path}.{_quoted(key)}" if path else _quoted(key)
        field = model.model_fields.get(key)
        if field is None or field.exclude:
            found.append(dotted)
            continue
        inner, shape = _model_of(field.annotation)
        if inner is None:
            continue
        if shape == "list" and isinstance(value, list):
            for index, entry in enumerate(value):
                found += _unknown(entry, inner, f"{dotted}[{index}]")
        elif shape == "dict" and isinstance(value, dict):
            for name, entry in value.items():
                found += _unknown(entry, inner, f"{dotted}.{_quoted(name)}")
        else:
            found += _unknown(value, inner, dotted)
    return found


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """The section model a field holds, and whether as one, a list or a dict of them."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, "one"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list and args:
        return _model_of(args[0])[0], "list"
    if origin is dict and len(args) == 2:
        return _model_of(args[1])[0], "dict"
    if origin in (typing.Union, UnionType) or origin is typing.Annotated:
        for arg in args:
            inner, shape = _model_of(arg)
            if inner is not None:
                return inner, shape
    return None, "one"


def _quoted(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else f'"{key}"'


def _line_of(where: Layout, dotted: str) -> str:
    """` (line N)` for a key of the file, found by its table and name."""
    table, _, name = dotted.rpartition(".")
    table = general_name(table.split("[")[0]) if table else ""
    for key in where.keys:
        if key.name == name and not key.commented and key.table == table:
            return f" (line {key.first + 1})"
    return ""


def _backup(target: Path) -> Path:
    return target.with_name(f"{target.name}.bak")


def _replace(target: Path, old: str, new: str) -> None:
    """Keep the old file as `.bak`, then put the new text in place at once, with the file's mode."""
    partial = target.with_name(f".{target.name}.partial")
    try:
        mode = target.stat().st_mode & 0o777
        _backup(target).write_text(old, encoding="utf-8")
        os.chmod(_backup(target), mode)
        partial.write_text(new, encoding="utf-8")
        os.chmod(partial, mode)
        os.replace(partial, target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise BotError(f"cannot write {exc.filename or target}: {exc.strerror or exc}") from exc
