"""Markdown to Telegram HTML: each construct, escaping, and well-formed output for any input."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from channels.telegram.html import is_plain, rendered, to_telegram_html

ALLOWED_TAGS = {"b", "i", "s", "u", "code", "pre", "a", "blockquote"}
ALLOWED_ATTRS = {"a": {"href"}, "code": {"class"}}
ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}


class TelegramHtmlChecker(HTMLParser):
    """Collects the visible text and records every way the HTML falls outside Telegram's subset."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED_TAGS:
            self.errors.append(f"tag <{tag}>")
        for name, _ in attrs:
            if name not in ALLOWED_ATTRS.get(tag, set()):
                self.errors.append(f"attribute {name} on <{tag}>")
        self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.errors.append(f"self-closing <{tag}/>")

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]!r}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if "<" in data or "&" in data or ">" in data:
            self.errors.append(f"bare markup character in {data!r}")
        self.text.append(data)

    def handle_entityref(self, name: str) -> None:
        if name not in ENTITIES:
            self.errors.append(f"entity &{name};")
        self.text.append(ENTITIES.get(name, ""))

    def handle_charref(self, name: str) -> None:
        self.errors.append(f"character reference &#{name};")

    def handle_comment(self, data: str) -> None:
        self.errors.append("comment")

    def handle_decl(self, decl: str) -> None:
        self.errors.append("declaration")

    def handle_pi(self, data: str) -> None:
        self.errors.append("processing instruction")

    def unknown_decl(self, data: str) -> None:
        self.errors.append("unknown declaration")


def check(html: str) -> str:
    """Assert `html` is well-formed Telegram HTML and return its visible text."""
    checker = TelegramHtmlChecker()
    checker.feed(html)
    checker.close()
    if checker.rawdata:  # HTMLParser holds back text it could not parse (a bare '<' or '&')
        checker.errors.append(f"unparsed {checker.rawdata!r}")
    assert not checker.errors, (html, checker.errors)
    assert not checker.stack, f"unclosed {checker.stack} in {html!r}"
    return "".join(checker.text)


def render(markdown: str) -> str:
    html = to_telegram_html(markdown)
    check(html)
    return html


# --- constructs -----------------------------------------------------------------------------------


def test_emphasis_strikethrough_and_inline_code() -> None:
    """Bold, italic, strikethrough and inline code map to b, i, s and code."""
    assert render("**bold** *it* _it_ ~~gone~~ `x = 1`") == (
        "<b>bold</b> <i>it</i> <i>it</i> <s>gone</s> <code>x = 1</code>"
    )


def test_fenced_code_keeps_its_language_and_escapes_content() -> None:
    """A fenced block becomes pre/code with a language class and escaped content, verbatim otherwise."""
    markdown = '```python\nif a < b and c > d:\n    print("&")\n```'
    assert render(markdown) == (
        '<pre><code class="language-python">if a &lt; b and c &gt; d:\n    print("&amp;")</code></pre>'
    )


def test_code_without_language_is_plain_pre() -> None:
    """Fenced code with no language, and indented code, become a bare pre block."""
    assert render("```\nplain\n```") == "<pre>plain</pre>"
    assert render("    indented <x>") == "<pre>indented &lt;x&gt;</pre>"


def test_suspicious_language_is_dropped() -> None:
    """An info string that is not a simple language name gives no class attribute."""
    assert render('```"><b>\nx\n```') == "<pre>x</pre>"


def test_links_escape_text_and_href() -> None:
    """A link keeps its URL with & escaped, and its text escaped."""
    assert render("[a <b> & c](https://e.com/?x=1&y=2)") == (
        '<a href="https://e.com/?x=1&amp;y=2">a &lt;b&gt; &amp; c</a>'
    )


def test_quote_in_a_link_never_ends_the_attribute() -> None:
    """A double quote in a link destination cannot break out of href."""
    html = render('[x](<https://e.com/a"onclick="b>)')
    assert html.count('"') == 2 and html.startswith('<a href="https://e.com/a')


def test_unsafe_and_hostless_links_become_text() -> None:
    """javascript:, relative and other non-web links keep their text but lose the link."""
    assert render("[run](javascript:alert(1))") == "[run](javascript:alert(1))"
    assert render("[file](/etc/passwd) [ftp](ftp://host/x)") == "file ftp"
    assert render("[me](tg://user?id=1)") == '<a href="tg://user?id=1">me</a>'


def test_autolink_is_a_link() -> None:
    """An autolink shows its URL and links to it."""
    assert render("<https://example.com/a>") == '<a href="https://example.com/a">https://example.com/a</a>'


def test_code_inside_a_link_is_plain_text() -> None:
    """Telegram links cannot contain code, so code in link text is rendered as text."""
    assert render("[`f()` docs](https://e.com)") == '<a href="https://e.com">f() docs</a>'


def test_headings_are_bold_lines() -> None:
    """Headings of any level become a bold line of their own."""
    assert render("# Title\ntext\n\nSub\n---") == "<b>Title</b>\n\ntext\n\n<b>Sub</b>"


def test_blockquote_and_nested_quote() -> None:
    """A quote becomes a blockquote; a nested quote merges into it since Telegram cannot nest them."""
    assert render("> a **b**\n>\n> > c") == "<blockquote>a <b>b</b>\n\nc</blockquote>"


def test_bullet_and_ordered_lists() -> None:
    """Bullets become "• " lines, ordered items count up from their start, nested lists indent."""
    markdown = "- one\n- two\n  - inner\n    1. deep\n\n3. three\n3. four"
    assert render(markdown) == "• one\n• two\n  • inner\n    1. deep\n\n3. three\n4. four"


def test_deep_lists_stop_indenting_after_three_levels() -> None:
    """Indentation grows two spaces a level up to three levels, keeping deep lists readable."""
    assert render("- a\n  - b\n    - c\n      - d\n        - e") == (
        "• a\n  • b\n    • c\n      • d\n      • e"
    )


def test_list_opening_an_item_shares_its_line() -> None:
    """A list that starts on its parent item's line stays on that line."""
    assert render("- - a\n  - b") == "• • a\n  • b"


def test_horizontal_rule() -> None:
    """A thematic break becomes a line of dashes."""
    assert render("a\n\n***\n\nb") == "a\n\n———\n\nb"


def test_images_become_links_with_alt_text() -> None:
    """An image links to its URL with its alt text, or "image" when it has none."""
    assert render("![a *cat*](https://e.com/c.png) ![](https://e.com/d.png)") == (
        '<a href="https://e.com/c.png">a cat</a> <a href="https://e.com/d.png">image</a>'
    )


def test_table_source_goes_into_pre() -> None:
    """A table is shown as its own source in a pre block, escaped."""
    markdown = "| a | b |\n|---|:-:|\n| 1 \\| x | <2> |"
    assert render(markdown) == "<pre>| a | b |\n|---|:-:|\n| 1 \\| x | &lt;2&gt; |</pre>"


def test_table_in_a_quote_loses_the_quote_markers() -> None:
    """A table inside a blockquote is shown without the '>' prefixes."""
    assert render("> | a |\n> |---|\n> | 1 |") == "<blockquote><pre>| a |\n|---|\n| 1 |</pre></blockquote>"


def test_breaks_and_paragraphs() -> None:
    """Soft and hard breaks become newlines; paragraphs are separated by exactly one blank line."""
    assert render("one\ntwo  \nthree\\\nfour\n\n\n\nnext") == "one\ntwo\nthree\nfour\n\nnext"


def test_raw_html_is_escaped_never_passed_through() -> None:
    """Inline and block HTML in the markdown shows as text."""
    assert render("a <b>bold</b> <script>x</script>") == (
        "a &lt;b&gt;bold&lt;/b&gt; &lt;script&gt;x&lt;/script&gt;"
    )
    assert render("<div>\n*x* & y\n</div>") == "&lt;div&gt;\n*x* &amp; y\n&lt;/div&gt;"


def test_text_escaping_and_entities() -> None:
    """<, > and & in text are escaped; Markdown entities are decoded then re-escaped."""
    assert render("1 < 2 && 3 > 2 &amp; &copy;") == "1 &lt; 2 &amp;&amp; 3 &gt; 2 &amp; ©"


def test_trailing_whitespace_is_trimmed_and_blank_input_is_empty() -> None:
    """The result has no trailing whitespace; blank markdown renders to an empty string."""
    assert render("text\n\n\n   ") == "text"
    assert render("") == ""
    assert render("   \n\n") == ""


def test_empty_constructs_emit_no_empty_tags() -> None:
    """Empty code blocks, empty links and empty quotes produce no tags."""
    assert render("```\n```\n\n[](https://e.com)\n\n>") == ""
    assert render("a **[](https://e.com)** b") == "a  b"


# --- properties -----------------------------------------------------------------------------------

# Single characters plus a few longer tokens that rarely arise one character at a time.
MARKDOWNISH = st.lists(
    st.sampled_from([*"*_~[]()<>&`\n \t#->!|:.\\\"'1ab", "https://e.com", "&amp;", "&#0;", "```"]),
    max_size=80,
).map("".join)
_PARSER = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def slack(markdown: str) -> int:
    """The most the visible text may exceed the markdown by: 1 per block and 18 per list item.

    Every visible character comes from source text at least as long (text, code, raw HTML, table
    lines, alt text; escapes and entities only shrink), except: the separator between two blocks
    ("\\n\\n" where the source has at least one newline), at most 1 per block; and a list item's
    marker line, where "N. " can outgrow a source "1." by up to 10 digits, the indentation adds at
    most 6, and a tab split by the marker can expand into up to 2 more spaces: at most 18 per item.
    """
    tokens = _PARSER.parse(markdown)
    blocks = sum(1 for t in tokens if t.block and t.nesting >= 0 and t.type != "inline")
    items = sum(1 for t in tokens if t.type == "list_item_open")
    return blocks + 18 * items


@settings(max_examples=400, deadline=None)
@given(markdown=MARKDOWNISH)
def test_any_markdown_renders_to_well_formed_telegram_html(markdown: str) -> None:
    """Any input gives allowed, balanced, properly nested tags, only the four entities, no bare < or &."""
    check(to_telegram_html(markdown))


@settings(max_examples=400, deadline=None)
@given(markdown=MARKDOWNISH)
def test_visible_text_is_bounded_by_the_markdown(markdown: str) -> None:
    """The visible text is never longer than the markdown plus 1 per block and 18 per list item."""
    visible = check(to_telegram_html(markdown))
    assert len(visible) <= len(markdown) + slack(markdown)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80))
def test_any_unicode_text_is_escaped_and_kept(text: str) -> None:
    """Arbitrary Unicode never yields malformed HTML."""
    check(to_telegram_html(text))


# Prose-like text: mostly what plain replies are made of, with some of what makes text Markdown.
PROSE = st.lists(st.sampled_from(
    [*"abcXYZ  .,:;!?'\"()/@%$^{}-=+#>19", "é", "…", "—", "\n", "\n\n", "\t", "\u00a0", "\u2028",
     "*", "_", "`", "[", "]", "<", ">", "&", "~", "|", "\\", "\r", "\0", "  "]), max_size=60).map("".join)


@settings(max_examples=1500, deadline=None)
@given(text=PROSE | st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=60))
def test_plain_text_renders_as_itself(text: str) -> None:
    """Text `is_plain` takes past the parse is exactly what the parse and render give for it."""
    if is_plain(text):
        assert rendered(text) == text
        assert to_telegram_html(text) == text


@pytest.mark.parametrize("text", [
    "re: m1-2. The tide comes in twice a day because the moon pulls the sea toward it: see?",
    "First paragraph, plain.\n\nSecond one (with parentheses) and a 3.5 % figure!",
    "Ça va — très bien… 日本語も。",
])
def test_plain_prose_skips_the_parse(text: str) -> None:
    assert is_plain(text)
    assert to_telegram_html(text) == rendered(text) == text


@pytest.mark.parametrize("text", [
    "", "**bold**", "a_b", "`code`", "[link](http://x.y)", "<b>", "a & b", "~~x~~", "a | b",
    "\\escaped", "# heading", "> quote", "- item", "+ item", "* item", "1. item", "=", " lead",
    "trail ", "line\nbreak", "a\n\n\nb", "a\n\n", "tab\there", "nb\u00a0sp", "cr\rx", "nul\0",
    "p\n\n    code",
])
def test_markdown_and_odd_whitespace_are_parsed(text: str) -> None:
    assert not is_plain(text)
