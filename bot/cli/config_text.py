"""Config files as text, comments kept: their tables and keys (set or commented out) with the lines
that document them, and setting one value in place. `init` writes from the example this way and
`init --upgrade` compares a file with it.

A line is a header or a key once one leading `#` and the spaces around it are stripped (the
example's commented blocks); prose never starts with `[` or with `word =`. A commented key belongs
to the last header, commented or not; a set key to the last header that is set, as TOML reads it.
A line that is only a comment indented past the line start (`    # ...`, `#     # ...`) continues
the key line above it.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field

HEADER = re.compile(r"^\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+)$")
_CONTINUATION = re.compile(r"^#?\s+#")
# A table named by its key in the example (`[providers.local]`, `[channels.telegram.dms."123"]`)
# stands for any such table: the segment after one of these is a name the admin chooses.
PLACEHOLDERS = {
    "providers": "<name>", "accounts": "<name>", "models": "<model>", "prices": "<model>",
    "dms": "<user>", "group_settings": "<chat>", "guilds": "<guild>", "channel_settings": "<channel>",
}


@dataclass(slots=True)
class Table:
    """One header of a file and the lines under it up to the next header (0-based line numbers)."""

    name: str  # as written: 'channels.telegram.dms."123"'
    general: str  # with placeholders: "channels.telegram.dms.<user>"
    commented: bool
    header: int
    end: int  # the line after its last key line (and that key's continuation lines)
    within: str  # the set table a commented header sits in (its own name for a set one)


@dataclass(slots=True)
class Key:
    """A key line (set or commented out) with its continuation lines, in the table it belongs to."""

    table: str  # general name, as Table.general
    name: str
    commented: bool
    first: int
    end: int


@dataclass(slots=True)
class Layout:
    """Where the tables and keys of a config file's text are."""

    lines: list[str]
    tables: list[Table] = field(default_factory=list)
    keys: list[Key] = field(default_factory=list)

    def table(self, general: str) -> Table | None:
        """The first header for a table (any one of a placeholder's or a list's), a set one
        before one commented out."""
        found = sorted((table for table in self.tables if table.general == general),
                       key=lambda table: table.commented)
        return found[0] if found else None

    def key_names(self) -> set[tuple[str, str]]:
        return {(key.table, key.name) for key in self.keys}

    def intro(self, table: Table) -> list[str]:
        """The comment paragraph just above a header, which introduces it."""
        start = table.header
        while start > 0 and _is_prose(self.lines[start - 1]):
            start -= 1
        return self.lines[start:table.header]


def general_name(header: str) -> str:
    """A table's name with the names an admin chooses replaced by their placeholder."""
    parts = re.findall(r'"[^"]*"|[^.]+', header)
    return ".".join(
        PLACEHOLDERS[parts[i - 1].strip()] if i and parts[i - 1].strip() in PLACEHOLDERS
        else part.strip().strip('"')
        for i, part in enumerate(parts)
    )


def _is_prose(line: str) -> bool:
    """A comment line that is neither a (commented) header or key nor continues one."""
    stripped = line.strip().removeprefix("#").strip()
    return (line.startswith("#") and not _CONTINUATION.match(line)
            and not HEADER.match(stripped) and not KEY.match(stripped))


def layout(text: str) -> Layout:
    """The tables and keys of a config file's text."""
    found = Layout(text.splitlines())
    section = real_section = ""
    current: Table | None = None
    last_key: Key | None = None
    for number, line in enumerate(found.lines):
        if last_key is not None and last_key.end == number and _CONTINUATION.match(line):
            last_key.end = number + 1
            if current is not None:
                current.end = number + 1
            continue
        stripped = line.strip()
        commented = stripped.startswith("#")
        stripped = stripped.removeprefix("#").strip()
        if header := HEADER.match(stripped):
            section = general_name(header.group(1))
            if not commented:
                real_section = section
            current = Table(header.group(1), section, commented, number, number + 1, real_section)
            found.tables.append(current)
            last_key = None
            continue
        if key := KEY.match(stripped):
            last_key = Key(section if commented else real_section, key.group(1), commented,
                           number, number + 1)
            found.keys.append(last_key)
            if current is not None:
                current.end = number + 1
    return found


def set_value(text: str, table: str, key: str, value: str) -> str:
    """`text` with `key` in the set table `[table]` given this TOML value, its comment kept in
    place; a commented-out key line is set. A KeyError when the table has no such line (before
    any sub-table's header)."""
    found = layout(text)
    lines = found.lines
    header = next((t for t in found.tables if t.name == table and not t.commented), None)
    following = [t.header for t in found.tables if header is not None and t.header > header.header]
    stop = min(following, default=len(lines))
    match = next((k for k in found.keys if header is not None and k.name == key
                  and header.header < k.first < stop), None)
    if match is None:
        raise KeyError(f"{table}.{key}")
    line = lines[match.first]
    body = line.lstrip().removeprefix("#").lstrip() if match.commented else line
    name, _, rest = body.partition("=")
    comment = split_comment(rest)[1].lstrip()
    start = f"{name.rstrip()} = {value}"
    # Keep the comment in its column when the value fits before it.
    column = len(line) - len(comment)
    lines[match.first] = start + (" " * max(2, column - len(start)) + comment if comment else "")
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def split_comment(rest: str) -> tuple[str, str]:
    """A key line's value and its trailing comment (with the spaces before it)."""
    for match in re.finditer(r"\s+#", rest):
        try:
            tomllib.loads(f"v = {rest[:match.start()]}")
        except tomllib.TOMLDecodeError:
            continue
        return rest[:match.start()].strip(), rest[match.start():]
    return rest.strip(), ""


def toml_value(value: bool | int | str | list[int]) -> str:
    """A value as TOML writes it (the few kinds `init` sets)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(str(item) for item in value) + "]"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
