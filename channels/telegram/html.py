"""Telegram HTML: the model's Markdown rendered into the tag subset of Telegram's parse_mode="HTML".

Markdown is parsed by markdown-it-py (CommonMark plus tables and strikethrough) and the token tree
is rendered by hand, so only b, i, s, code, pre, a and blockquote tags are ever produced, always
balanced; everything else (raw HTML included) becomes escaped text. Telegram has no lists, headings,
rules or tables, so those become plain lines: "• item", "1. item", a bold line, "———", and the
table's source in a <pre> block. `telegram_chunks` cuts a reply where its rendered text fits a
message.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import structlog
from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode
from telegram.constants import ParseMode
from telegram.error import BadRequest

from bot.core.chunking import split_message

log = structlog.get_logger("switchboard.telegram")

_MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])

_RULE = "———"
_BULLET = "• "
_INDENT = "  "
_MAX_INDENT_LEVELS = 3  # deeper lists keep this indentation; chat clients wrap long lines anyway
_LANGUAGE = re.compile(r"[\w#+.-]+")
_QUOTE_PREFIX = re.compile(r"^\s*> ?")
_ITEM_PREFIX = re.compile(r"^\s*(?:[-+*]|\d{1,9}[.)])(?:[ \t]+|$)")
_INLINE_TAGS = {"strong": "b", "em": "i", "s": "s"}


# Each reply is rendered once to find where it fits a message (`telegram_chunks`) and again when
# sent: the second time comes from here. A pure function of its text, so a few recent ones suffice.
@functools.lru_cache(maxsize=32)
def to_telegram_html(markdown: str) -> str:
    """Render Markdown as Telegram HTML; the result has trailing whitespace trimmed."""
    # Plain prose is what `rendered` gives back for it, without the parse.
    return markdown if is_plain(markdown) else rendered(markdown)


def rendered(markdown: str) -> str:
    """`to_telegram_html` by markdown-it's parse, for any text."""
    source = markdown.replace("\r\n", "\n").replace("\r", "\n").replace("\0", "\ufffd")
    tree = SyntaxTreeNode(_MD.parse(source))
    return _Renderer(source.split("\n")).blocks(tree.children, "\n\n", depth=0, quoted=False).rstrip()


# Many replies are plain prose: paragraphs no Markdown construct can start in render as they are.
# A paragraph is plain when it is one printable line (no tab, control or odd space), without the
# characters inline markup, entities, HTML, links and tables are made of, neither starting with a
# block's marker (a heading, quote, list, rule or indented code) nor ending in a space.
_MARKUP = re.compile(r"[\\`*_\[\]<>&~|]")
_BLOCK_START = frozenset("#>-+*=0123456789 ")


def is_plain(markdown: str) -> bool:
    """Whether `markdown` renders as itself: plain paragraphs, each apart by one blank line."""
    if _MARKUP.search(markdown) is not None:
        return False
    for paragraph in markdown.split("\n\n"):
        if (not paragraph or paragraph[0] in _BLOCK_START or paragraph[-1] == " "
                or not paragraph.isprintable()):
            return False
    return True


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_attr(text: str) -> str:
    return _escape(text).replace('"', "&quot;")


def _safe_href(url: str) -> str | None:
    """The URL if Telegram will accept it as a link; it rejects hostless ones (a 400 for the message)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme in ("http", "https") and parts.hostname:
        return url
    if parts.scheme == "tg":
        return url
    return None


class _Renderer:
    """Renders one parsed document; holds its source lines for tables."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def blocks(self, nodes: list[SyntaxTreeNode], separator: str, *, depth: int, quoted: bool) -> str:
        rendered = (self.block(node, depth=depth, quoted=quoted) for node in nodes)
        return separator.join(part for part in rendered if part)

    def block(self, node: SyntaxTreeNode, *, depth: int, quoted: bool) -> str:
        kind = node.type
        if kind == "paragraph":
            return self.inline_children(node)
        if kind == "heading":
            text = self.inline_children(node)
            return f"<b>{text}</b>" if text else ""
        if kind == "blockquote":
            # A quote starts its own indentation: its lines begin at the quote bar, not the page edge.
            inner = self.blocks(node.children, "\n\n", depth=0, quoted=True)
            # Telegram does not nest quotes: an inner quote merges into the outer one.
            return inner if quoted or not inner else f"<blockquote>{inner}</blockquote>"
        if kind in ("bullet_list", "ordered_list"):
            return self.items(node, depth=depth, quoted=quoted)
        if kind in ("fence", "code_block"):
            return _code_block(node.content, node.info if kind == "fence" else "")
        if kind == "hr":
            return _RULE
        if kind == "table":
            return _code_block(self.table_source(node), "")
        if kind == "html_block":
            return _escape(node.content.rstrip("\n"))
        if kind == "inline":
            return self.inline(node.children, in_link=False)
        return self.blocks(node.children, "\n\n", depth=depth, quoted=quoted)

    def items(self, node: SyntaxTreeNode, *, depth: int, quoted: bool) -> str:
        start = node.attrs.get("start", 1) if node.type == "ordered_list" else None
        indent = _INDENT * min(depth, _MAX_INDENT_LEVELS)
        lines = []
        for index, item in enumerate(node.children):
            marker = _BULLET if start is None else f"{int(start) + index}. "
            body = self.blocks(item.children, "\n", depth=depth + 1, quoted=quoted)
            # A list opening the item ("- - x") shares the item's line, so drop its indentation.
            lines.append((indent + marker + body.lstrip(" ")).rstrip())
        return "\n".join(lines)

    def table_source(self, node: SyntaxTreeNode) -> str:
        """The table as written, without the quote markers and list indentation around it."""
        if node.map is None:
            return ""
        first, end = node.map
        lines = self.lines[first:end]
        containers = []
        parent = node.parent
        while parent is not None and parent.type != "root":
            containers.append(parent)
            parent = parent.parent
        for container in reversed(containers):
            if container.type == "blockquote":
                lines = [_QUOTE_PREFIX.sub("", line, count=1) for line in lines]
            elif container.type == "list_item" and container.map is not None:
                opening = container.map[0] - first
                lines = [
                    _ITEM_PREFIX.sub("", line, count=1) if i == opening else line
                    for i, line in enumerate(lines)
                ]
        return "\n".join(line.strip() for line in lines)

    def inline_children(self, node: SyntaxTreeNode) -> str:
        return "".join(self.inline(child.children, in_link=False) for child in node.children)

    def inline(self, nodes: list[SyntaxTreeNode], *, in_link: bool) -> str:
        return "".join(self.span(node, in_link=in_link) for node in nodes)

    def span(self, node: SyntaxTreeNode, *, in_link: bool) -> str:
        kind = node.type
        if kind in ("text", "html_inline"):
            return _escape(node.content)
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind == "code_inline":
            # Telegram links cannot contain code entities, so code inside a link is plain text.
            code = _escape(node.content)
            return code if in_link or not code else f"<code>{code}</code>"
        if kind in _INLINE_TAGS:
            inner = self.inline(node.children, in_link=in_link)
            tag = _INLINE_TAGS[kind]
            return f"<{tag}>{inner}</{tag}>" if inner else ""
        if kind == "link":
            inner = self.inline(node.children, in_link=True)
            href = None if in_link else _safe_href(str(node.attrs.get("href", "")))
            if href is None or not inner.strip():
                return inner
            return f'<a href="{_escape_attr(href)}">{inner}</a>'
        if kind == "image":
            alt = _escape(_plain(node))
            src = None if in_link else _safe_href(str(node.attrs.get("src", "")))
            if src is None:
                return alt
            return f'<a href="{_escape_attr(src)}">{alt or "image"}</a>'
        return self.inline(node.children, in_link=in_link)


def _plain(node: SyntaxTreeNode) -> str:
    """The text of an inline subtree with its markup dropped (an image's alt text)."""
    if node.type in ("softbreak", "hardbreak"):
        return "\n"
    if not node.children:
        return node.content
    return "".join(_plain(child) for child in node.children)


def _code_block(content: str, info: str) -> str:
    code = content.rstrip("\n")
    if not code.strip():
        return ""
    words = info.split()
    language = words[0] if words and _LANGUAGE.fullmatch(words[0]) else ""
    if language:
        return f'<pre><code class="language-{_escape_attr(language)}">{_escape(code)}</code></pre>'
    return f"<pre>{_escape(code)}</pre>"


MESSAGE_LIMIT = 4096  # Telegram counts a message's visible text in UTF-16 units
MIN_CHUNK = 256


def telegram_chunks(markdown: str, size: int = MESSAGE_LIMIT) -> list[str]:
    """Markdown chunks whose rendered text fits a message, counted as Telegram does (UTF-16).

    Rendering can lengthen text a little (list bullets, numbering) and emoji count twice, so a
    chunk that renders too long is split again, smaller.
    """
    chunks: list[str] = []
    for chunk in split_message(markdown, size):
        if _visible_units(to_telegram_html(chunk)) <= MESSAGE_LIMIT or size <= MIN_CHUNK:
            chunks.append(chunk)
        else:
            chunks.extend(telegram_chunks(chunk, max(size * 3 // 4, MIN_CHUNK)))
    return chunks


def _visible_units(rendered: str) -> int:
    visible = html.unescape(re.sub(r"<[^>]*>", "", rendered))
    return len(visible.encode("utf-16-le")) // 2


async def html_or_plain(call: Callable[[str, str | None], Awaitable[Any]], chunk: str) -> Any:
    """Send (or edit to) a Markdown chunk as Telegram HTML, or as plain text when Telegram cannot
    parse what we rendered: `call(text, parse_mode)` does the request."""
    try:
        return await call(to_telegram_html(chunk), ParseMode.HTML)
    except BadRequest as exc:
        if "parse entities" not in str(exc).lower():
            raise
        log.warning("Telegram rejected the formatting; sending plain text", error=str(exc))
        return await call(chunk, None)
