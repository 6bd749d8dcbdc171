"""The docs stay true to the code: every config key documented once, links that resolve, the commands
listed, the man page rendered from the parser."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path
from typing import Any

from bot.cli import _parser
from bot.cli.manpage import render

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config.toml.example"
CONFIGURATION = ROOT / "docs" / "configuration.md"
README = ROOT / "README.md"

# A table named by its key in the example (`[providers.local]`, `[channels.telegram.dms."123"]`) is
# documented under a placeholder: the segment after one of these becomes the placeholder.
PLACEHOLDERS = {
    "providers": "<name>", "accounts": "<name>", "models": "<model>", "prices": "<model>",
    "dms": "<user>", "group_settings": "<chat>", "guilds": "<guild>", "channel_settings": "<channel>",
    "room_settings": "<room>",
}
# Sub-tables that take any key of another section: their example keys stand for all of them.
OPEN_TABLES = {"agents.conversation", "agents.roles", "agents.tools"}

HEADER = re.compile(r"^\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+)$")
# A row of a table in docs/configuration.md: `| `section.key` | default | what it does |`.
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*(.*?)\s*\|")

_UNSET = object()


def _table(header: str) -> str:
    parts = re.findall(r'"[^"]*"|[^.]+', header)
    return ".".join(
        PLACEHOLDERS[parts[i - 1]] if i and parts[i - 1] in PLACEHOLDERS else part.strip().strip('"')
        for i, part in enumerate(parts)
    )


def example_keys(text: str) -> dict[str, Any]:
    """Every key of the example, set or commented out, as `section.key`, with its value when set.

    A line is a header or a key once one leading `#` and the spaces around it are stripped;
    prose never starts with `[` or with `word =`. A commented key belongs to the last header,
    commented or not (the example's commented blocks); a set key to the last header that is set,
    as TOML reads it.
    """
    keys: dict[str, Any] = {}
    section = real_section = ""
    for line in text.splitlines():
        stripped = line.strip()
        commented = stripped.startswith("#")
        stripped = stripped.removeprefix("#").strip()
        if header := HEADER.match(stripped):
            section = _table(header.group(1))
            if not commented:
                real_section = section
            continue
        if key := KEY.match(stripped):
            table = section if commented else real_section
            name = f"{table}.<key>" if table in OPEN_TABLES else f"{table}.{key.group(1)}"
            value = _UNSET if commented else tomllib.loads(f"v = {key.group(2)}")["v"]
            if keys.get(name, _UNSET) is _UNSET:
                keys[name] = value
    return keys


def documented_keys(text: str) -> dict[str, str]:
    """Each key docs/configuration.md documents (first cell of a table row), with its default cell."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        if (row := ROW.match(line)) and "." in row.group(1):
            rows[row.group(1)] = row.group(2)
    return rows


def _missing_from_docs(example: str, docs: str) -> list[str]:
    documented = documented_keys(docs)
    return [f"{key}: in {EXAMPLE.name}, missing from docs/{CONFIGURATION.name}"
            for key in example_keys(example) if key not in documented]


def _missing_from_example(example: str, docs: str) -> list[str]:
    keys = example_keys(example)
    return [f"{key}: in docs/{CONFIGURATION.name}, missing from {EXAMPLE.name}"
            for key in documented_keys(docs) if key not in keys]


def test_example_keys_are_read_set_or_commented() -> None:
    """The example's keys are read from set lines, commented lines and commented table headers."""
    text = (
        "[tools]\nenabled = true          # a comment = not a key\n"
        "# [[tools.rules]]\n# sessions = \"*\"\n#                # continued\nrules = []\n"
        '# [providers.local.models."qwen3:8b"]\n# context_window = 32768\n'
    )
    assert example_keys(text) == {
        "tools.enabled": True, "tools.rules.sessions": _UNSET, "tools.rules": [],
        "providers.<name>.models.<model>.context_window": _UNSET,
    }


def test_every_example_key_is_documented() -> None:
    """Every key of config.toml.example, set or commented out, has a row in docs/configuration.md."""
    assert _missing_from_docs(EXAMPLE.read_text(encoding="utf-8"),
                              CONFIGURATION.read_text(encoding="utf-8")) == []


def test_every_documented_key_is_in_the_example() -> None:
    """Every key docs/configuration.md documents is in config.toml.example."""
    assert _missing_from_example(EXAMPLE.read_text(encoding="utf-8"),
                                 CONFIGURATION.read_text(encoding="utf-8")) == []


def test_a_key_dropped_from_either_side_is_named() -> None:
    """A key missing on one side fails with its name and the file that lacks it."""
    example = "[router]\nmax_concurrent_turns = 8\n# shutdown_grace = 10.0\n"
    docs = "| `router.max_concurrent_turns` | `8` | x |\n| `router.lost_key` | `1` | x |\n"
    assert _missing_from_docs(example, docs) == [
        "router.shutdown_grace: in config.toml.example, missing from docs/configuration.md"]
    assert _missing_from_example(example, docs) == [
        "router.lost_key: in docs/configuration.md, missing from config.toml.example"]


def test_documented_defaults_are_the_example_values() -> None:
    """A key the example sets is documented with that value as its default, as one code span."""
    documented = documented_keys(CONFIGURATION.read_text(encoding="utf-8"))
    wrong = []
    for key, value in example_keys(EXAMPLE.read_text(encoding="utf-8")).items():
        if value is _UNSET or key not in documented:
            continue
        cell = re.fullmatch(r"`([^`]+)`", documented[key])
        written = tomllib.loads(f"v = {cell.group(1)}")["v"] if cell else _UNSET
        if written != value or type(written) is not type(value):
            wrong.append(f"{key}: docs/configuration.md says {documented[key]!r}, the example {value!r}")
    assert wrong == []


def _anchors(markdown: str) -> set[str]:
    """The heading anchors GitHub makes: lower case, punctuation out, spaces to hyphens, -1 on a repeat."""
    anchors: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not (heading := re.match(r"^#{1,6} (.+)$", line)):
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in anchors:
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def test_links_between_pages_resolve() -> None:
    """Every relative link in README.md, docs/ and bench/ names a file that exists, and a heading in it."""
    pages = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md"))]
    broken = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}: no such file")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text(encoding="utf-8")):
                broken.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    assert broken == []


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(f"{prefix}{name}")
                found.extend(_commands(sub, f"{prefix}{name} "))
    return found


def test_readme_lists_every_command() -> None:
    """The README's command table names every command and subcommand `switchboard --help` has."""
    lines = README.read_text(encoding="utf-8").splitlines()
    table = "\n".join(line for line in lines if line.startswith("|"))
    missing = [name for name in _commands(_parser()) if f"`switchboard {name}" not in table]
    assert missing == []


def test_man_page_has_every_command() -> None:
    """The man page rendered from the parser is roff with a section per command and its options."""
    page = render(_parser())
    assert page.startswith(".TH SWITCHBOARD 1 ")
    for name in _commands(_parser()):
        assert f'.SS "switchboard {name}"'.replace("-", "\\-") in page, name
    assert "\\-\\-older\\-than" in page and "\\-\\-config" in page
    assert ".SH EXIT STATUS" in page
