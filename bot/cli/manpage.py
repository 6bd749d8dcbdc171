"""The man page: `switchboard.1` rendered in roff from the command's own argparse parser.

`make man` runs `python -m bot.cli.manpage switchboard.1`; `man ./switchboard.1` reads it. Every
command and subcommand gets a section with its usage, description, options and examples, so the
page cannot say anything `switchboard COMMAND --help` does not.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime

__all__ = ["render"]


def render(parser: argparse.ArgumentParser, *, version: str = "", day: date | None = None) -> str:
    """The whole page for `parser` (the top-level `switchboard` parser) as roff."""
    day = day or _build_date()
    lines = [
        f'.TH {parser.prog.upper()} 1 "{day.isoformat()}" "{_escape(version or parser.prog)}" '
        '"User Commands"',
        ".SH NAME",
        f"{parser.prog} \\- {_escape(parser.description or '')}",
        ".SH SYNOPSIS",
        _escape(_usage(parser)),
        ".SH DESCRIPTION",
        _escape(parser.description or ""),
        ".SH OPTIONS",
        *_options(parser),
        ".SH COMMANDS",
    ]
    for name, command in _commands(parser, parser.prog):
        lines += [f'.SS "{_escape(name)}"', ".nf", _escape(_usage(command)), ".fi", ".PP"]
        lines += _paragraphs(command.description or "")
        lines += _options(command)
        if command.epilog:
            lines += _examples(command.epilog)
    lines += [
        ".SH EXIT STATUS",
        _escape(parser.epilog or ""),
        ".SH FILES",
        ".TP",
        "\\fIconfig.toml\\fR",
        "the config file read by default (\\fB\\-\\-config\\fR PATH for another); "
        "\\fBswitchboard init\\fR writes it from the documented example.",
        ".SH SEE ALSO",
        "README.md and docs/ in the source tree: docs/configuration.md documents every config key.",
    ]
    return "\n".join(lines) + "\n"


def _build_date() -> date:
    # SOURCE_DATE_EPOCH keeps a rebuilt page byte-for-byte the same (reproducible builds).
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    return datetime.fromtimestamp(int(epoch), UTC).date() if epoch else date.today()


def _commands(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Each command and subcommand with its full name (`switchboard db backup`), depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield f"{prefix} {name}", command
                yield from _commands(command, f"{prefix} {name}")


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().removeprefix("usage:").split())


def _options(parser: argparse.ArgumentParser) -> list[str]:
    lines: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        lines += [".TP", _term(action), _escape(action.help or "")]
    return lines


def _term(action: argparse.Action) -> str:
    """How an option or argument is written: bold names, the value it takes in italics."""
    if action.choices is not None and action.metavar is None:
        value = "{" + ",".join(str(choice) for choice in action.choices) + "}"
    else:
        value = str(action.metavar or (action.dest.upper() if action.option_strings else action.dest))
    if not action.option_strings:
        return f"\\fI{_escape(value)}\\fR"
    names = ", ".join(f"\\fB{_escape(option)}\\fR" for option in action.option_strings)
    takes_value = action.nargs != 0 and not isinstance(action, argparse._VersionAction)
    return f"{names} \\fI{_escape(value)}\\fR" if takes_value else names


def _paragraphs(text: str) -> list[str]:
    lines: list[str] = []
    for paragraph in text.strip().split("\n\n"):
        if lines:
            lines.append(".PP")
        lines.append(_escape(" ".join(paragraph.split())))
    return lines


def _examples(epilog: str) -> list[str]:
    body = [line.strip() for line in epilog.splitlines()[1:] if line.strip()]  # after "examples:"
    return [".PP", "Examples:", ".RS", ".nf", *(_escape(line) for line in body), ".fi", ".RE"]


def _escape(text: str) -> str:
    """Text safe in roff: backslashes and hyphens escaped, no line read as a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(f"\\&{line}" if line.startswith((".", "'")) else line for line in text.splitlines())


def main(argv: Sequence[str] | None = None) -> None:
    from importlib.metadata import PackageNotFoundError, version

    from bot.cli import _parser

    args = argparse.ArgumentParser(prog="python -m bot.cli.manpage", description=__doc__)
    args.add_argument("output", nargs="?", default="switchboard.1", help="the file to write (switchboard.1)")
    output = args.parse_args(argv).output
    try:
        label = f"switchboard {version('switchboard')}"
    except PackageNotFoundError:
        label = "switchboard"
    parser = _parser()
    page = render(parser, version=label)
    with open(output, "w", encoding="utf-8") as file:
        file.write(page)
    count = sum(1 for _ in _commands(parser, parser.prog))
    print(f"wrote {output}: {count} commands, {len(page.splitlines())} lines; read it with `man ./{output}`",
          file=sys.stderr)


if __name__ == "__main__":
    main()
