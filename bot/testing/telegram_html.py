"""Telegram's HTML parse mode, after tdlib's parse_html (td/telegram/MessageEntity.cpp): text and
entities from HTML, or the error Telegram gives; offsets count UTF-16 code units."""

from __future__ import annotations

import re

from bot.testing.telegram_values import JSON, utf16_len


class EntityParseError(ValueError):
    """Why Telegram rejects HTML, e.g. 'Unexpected end tag at byte offset 3'."""


_TAG_TYPES = {"b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
              "ins": "underline", "s": "strikethrough", "strike": "strikethrough", "del": "strikethrough",
              "tg-spoiler": "spoiler", "span": "spoiler", "a": "text_link", "code": "code", "pre": "pre",
              "blockquote": "blockquote", "tg-emoji": "custom_emoji"}
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_ENTITY = re.compile(r"&(?:#x([0-9a-fA-F]*)|#([0-9]*)|([a-zA-Z]*));?")
_TAG_NAME = re.compile(r"</?([^\s>]*)")
_VALUE = r"(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9.-]*(?=[\s>]))"
_START_TAG = re.compile(rf"<[^\s>]+((?:\s+[^\s=>]+\s*=\s*{_VALUE}|\s+expandable)*)\s*>", re.IGNORECASE)
_ATTRIBUTE = re.compile(rf"([^\s=>]+)\s*=\s*({_VALUE})")
_END_TAG = re.compile(r"</[^\s>]*\s*>")


def _decode_entity(html: str, i: int) -> tuple[str, int] | None:
    """The character of the entity at html[i] ("&") and the index after it; None keeps '&' literal."""
    m = _ENTITY.match(html, i)
    if m is None:
        return None
    hexa, dec, name = m.groups()
    if name is not None:
        return (_NAMED[name], m.end()) if name in _NAMED else None
    code = int(hexa or dec, 16 if hexa is not None else 10) if hexa or dec else 0
    if 0xD800 <= code <= 0xDFFF:
        raise EntityParseError("Text contains invalid Unicode characters after decoding HTML entities, "
                               "check for unmatched surrogate code units")
    return (chr(code), m.end()) if 0 < code < 0x10FFFF else None


def _unescape(value: str) -> str:
    return _ENTITY.sub(lambda m: (_decode_entity(m.group(), 0) or (m.group(),))[0], value)


def parse_html(html: str) -> tuple[str, list[JSON]]:
    """Text and entities of `html` under parse_mode HTML; raises EntityParseError with tdlib's words.

    Faithful to tdlib's parse_html for tags, entities and nesting; a malformed attribute list is
    reported as "Unclosed start tag" instead of tdlib's finer-grained reasons.
    """
    out: list[str] = []
    units = 0  # UTF-16 code units emitted so far
    open_tags: list[tuple[str, str, int, int]] = []  # tag, argument, start in units, index in out
    entities: list[JSON] = []
    i = 0

    def fail(reason: str, suffix: str = "") -> EntityParseError:
        return EntityParseError(f"{reason} at byte offset {len(html[:i].encode())}{suffix}")

    while i < len(html):
        ch = html[i]
        decoded = _decode_entity(html, i) if ch == "&" else None
        if decoded or ch != "<":
            text, i = decoded or (ch, i + 1)
            out.append(text)
            units += utf16_len(text)
            continue
        name_match = _TAG_NAME.match(html, i)
        assert name_match is not None
        tag = name_match.group(1).lower()
        if not html.startswith("</", i):
            if name_match.end() == len(html):
                raise fail("Unclosed start tag")
            if tag not in _TAG_TYPES:
                raise fail(f'Unsupported start tag "{tag}"')
            m = _START_TAG.match(html, i)
            if m is None:
                raise fail("Unclosed start tag")
            argument = ""
            for attr, raw in _ATTRIBUTE.findall(m.group(1) + ">"):  # ">" ends a bare value
                value = _unescape(raw[1:-1]) if raw[:1] in "'\"" and raw else raw.lower()
                if (tag, attr) in {("a", "href"), ("tg-emoji", "emoji-id")}:
                    argument = value
                elif (tag, attr) in {("code", "class"), ("span", "class")}:
                    argument = value.removeprefix("language-" if tag == "code" else "tg-")
            if tag == "blockquote" and re.search(r"\bexpandable\b", m.group(1), re.IGNORECASE):
                argument = "expandable"
            if tag == "span" and argument != "spoiler":
                raise fail('Tag "span" must have class "tg-spoiler"')
            open_tags.append((tag, argument, units, len(out)))
            i = m.end()
            continue
        if not open_tags:
            raise fail("Unexpected end tag")
        m = _END_TAG.match(html, i)
        if m is None:
            raise fail("Unclosed end tag")
        top, argument, start, out_index = open_tags[-1]
        if tag and tag != top:
            raise fail("Unmatched end tag", f', expected "</{top}>", found "</{tag}>"')
        open_tags.pop()
        i = m.end()
        if units == start:
            continue  # empty entities are dropped
        entity: JSON = {"type": _TAG_TYPES[top], "offset": start, "length": units - start}
        last = [entities[-1].get(k) for k in ("type", "offset", "length")] if entities else []
        if top == "tg-emoji" and not (argument.isdigit() and int(argument)):
            raise EntityParseError("Invalid custom emoji identifier specified")
        if top == "tg-emoji":
            entity["custom_emoji_id"] = argument
        elif top == "a":
            entity["url"] = argument or "".join(out[out_index:])
        elif top == "blockquote" and argument:
            entity["type"] = "expandable_blockquote"
        elif top == "code" and argument:
            entity["language"] = argument  # moved to the enclosing <pre> below, or dropped
        elif top == "pre" and last == ["code", start, units - start]:
            # <pre><code class="language-x">…</code></pre> is one pre entity with a language.
            entity |= {k: v for k, v in entities.pop().items() if k == "language"}
        entities.append(entity)
    if open_tags:
        raise EntityParseError(f'Can\'t find end tag corresponding to start tag "{open_tags[-1][0]}"')
    for entity in entities:
        if entity["type"] == "code":
            entity.pop("language", None)
    return "".join(out), sorted(entities, key=lambda e: (e["offset"], -e["length"]))
