"""Slack mrkdwn: the model's Markdown in Slack's own markup, cut into messages under its limit.

Slack reads `*bold*`, `_italic_`, `~strike~`, `` `code` ``, fenced blocks (without a language),
`<url|label>` links and `>` quotes; it has no headings or tables. So `**bold**` and `__bold__`
become `*bold*`, `*italic*` becomes `_italic_`, `~~s~~` becomes `~s~`, a heading becomes a bold
line, a `-`/`*`/`+` list item a "•" line, `[label](url)` becomes `<url|label>`, and a fence loses its
language. `&`, `<` and `>` are escaped everywhere (code included), as Slack requires: so whatever
the model writes, `<!channel>`, `<!here>` or `<@U…>`, is shown as text and pings nobody.

A reply is cut first, as Markdown, by `bot.core.chunking` (never inside a code block: a block cut in
two is closed and reopened), then each piece is rendered; escaping adds little, and the pieces stay
well under Slack's 40 000-character limit and near its 4 000-character display limit.
"""

from __future__ import annotations

import re

from bot.core.chunking import split_message

# Slack folds a message longer than 4 000 characters behind "Show more"; cut Markdown well below,
# since escaping and link syntax add a little.
CHUNK_LIMIT = 3_500

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+|mailto:[^)\s]+)\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HOLD = "\x00{}\x00"  # a placeholder for text already rendered (code spans, links)
_HELD = re.compile(r"\x00(\d+)\x00")
_STAR = "\x01"  # bold's asterisk, kept apart from italics until the end


def escape(text: str) -> str:
    """Slack's three control characters as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """Render Markdown as Slack mrkdwn (see the module docstring)."""
    lines: list[str] = []
    fence: str | None = None
    for line in markdown.replace("\r\n", "\n").replace("\0", "\ufffd").split("\n"):
        opened = _FENCE.match(line)
        if fence is None and opened is not None:
            fence = opened.group(2)
            lines.append("```")
            continue
        if fence is not None:
            if opened is not None and opened.group(2).startswith(fence) and not opened.group(3).strip():
                fence = None
                lines.append("```")
            else:
                lines.append(escape(line))
            continue
        lines.append(_block_line(line))
    if fence is not None:
        lines.append("```")
    return "\n".join(lines).strip("\n")


def _block_line(line: str) -> str:
    if _RULE.match(line):
        return "───"
    heading = _HEADING.match(line)
    if heading is not None:
        return f"*{_inline(heading.group(1))}*" if heading.group(1) else ""
    bullet = _BULLET.match(line)
    if bullet is not None:
        return f"{bullet.group(1)}• {_inline(bullet.group(2))}"
    if line.lstrip().startswith(">"):
        quoted = line.lstrip()[1:]
        return ">" + _inline(quoted)
    return _inline(line)


def _inline(text: str) -> str:
    held: list[str] = []

    def hold(rendered: str) -> str:
        held.append(rendered)
        return _HOLD.format(len(held) - 1)

    text = _CODE_SPAN.sub(lambda m: hold(f"`{escape(m.group(2))}`"), text)
    text = _LINK.sub(lambda m: hold(f"<{escape(m.group(2))}|{escape(m.group(1))}>"), text)
    text = escape(text)
    text = _BOLD.sub(lambda m: f"{_STAR}{m.group(2)}{_STAR}", text)
    text = _ITALIC.sub(lambda m: f"_{m.group(1)}_", text)
    text = _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    text = text.replace(_STAR, "*")
    return _HELD.sub(lambda m: held[int(m.group(1))], text)


def slack_chunks(markdown: str, limit: int = CHUNK_LIMIT) -> list[str]:
    """The reply as mrkdwn messages, cut as Markdown first so no code block is split open."""
    return [rendered for piece in split_message(markdown, limit) if (rendered := to_mrkdwn(piece).strip())]
