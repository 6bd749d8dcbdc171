"""Message chunking: limits, preferred cut points, code fences closed and reopened, content kept."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.chunking import MIN_LIMIT, split_message

# An independent reading of fences, as a Markdown renderer sees them: an opening line is indentation,
# three or more backticks or tildes and an info string (no backtick after backticks); the block
# closes at a line of the same character, at least as long, and nothing else. Per the documented
# degrade, a fence too long to be closed and reopened within the limit is plain text.
OPENING = re.compile(r"([ \t]*)(`{3,}|~{3,})(.*)")
CLOSING = re.compile(r"[ \t]*(`{3,}|~{3,})\s*")
FENCE_LIKE = re.compile(r"[ \t]*(`{3,}|~{3,})")


def opening(line: str, limit: int) -> tuple[str, int] | None:
    match = OPENING.fullmatch(line)
    if not match or (match[2][0] == "`" and "`" in match[3]):
        return None
    if 2 * len(match[1] + match[2]) + 3 > limit:
        return None
    return match[2][0], len(match[2])


def open_fence_after(text: str, limit: int) -> str | None:
    """The opening line of the fence still open at the end of `text`, if any."""
    fence: tuple[str, int] | None = None
    opener = None
    for line in text.split("\n"):
        if fence is None:
            fence = opening(line, limit)
            opener = line if fence else None
        else:
            match = CLOSING.fullmatch(line)
            if match and match[1][0] == fence[0] and len(match[1]) >= fence[1]:
                fence, opener = None, None
    return opener


def squash(text: str) -> str:
    return "".join(text.split())


def content_matches(original: str, chunks: list[str]) -> bool:
    """True if the chunks, minus fence lines added at their edges, spell the original (whitespace aside)."""
    target = squash(original)
    offsets = {0}
    for index, chunk in enumerate(chunks):
        lines = chunk.split("\n")
        heads = [lines]
        if index > 0 and FENCE_LIKE.match(lines[0]):
            heads.append(lines[1:])
        bodies = []
        for body in heads:
            bodies.append(body)
            if body and FENCE_LIKE.match(body[-1]):
                bodies.append(body[:-1])
        pieces = {squash("\n".join(body)) for body in bodies}
        offsets = {o + len(p) for o in offsets for p in pieces if target.startswith(p, o)}
        if not offsets:
            return False
    return len(target) in offsets


def check_chunks(text: str, chunks: list[str], limit: int, max_lines: int | None) -> None:
    """The invariants every split keeps."""
    if not text.strip():
        assert chunks == []
        return
    assert chunks, "a non-blank text gives at least one chunk"
    for chunk in chunks:
        assert len(chunk) <= limit
        if max_lines is not None:
            assert chunk.count("\n") + 1 <= max_lines
        assert chunk.strip(), "no chunk is blank"
        assert chunk == chunk.rstrip(), "no trailing whitespace at a chunk's end"
        assert chunk.split("\n")[0].strip(), "no blank line at a chunk's start"
    if len(chunks) > 1:
        for chunk in chunks:
            assert open_fence_after(chunk, limit) is None, f"unbalanced fence in {chunk!r}"
    assert content_matches(text, chunks)


# --- unit tests -----------------------------------------------------------------------------------


def test_text_that_fits_is_returned_whole() -> None:
    """A text within both limits comes back as the single chunk it was."""
    text = "Hello there.\n\nSecond paragraph."
    assert split_message(text, 4096) == [text]
    assert split_message(text, len(text), max_lines=3) == [text]


def test_blank_input_gives_no_chunks() -> None:
    """Empty and whitespace-only input yields an empty list."""
    assert split_message("", 100) == []
    assert split_message(" \n\t\n  ", 100) == []


def test_blank_lines_at_the_edges_are_stripped() -> None:
    """Leading blank lines and trailing whitespace are dropped, the first line's indentation kept."""
    assert split_message("\n \n    code\nmore  \n\n", 100) == ["    code\nmore"]


def test_limits_below_the_minimum_are_rejected() -> None:
    """A limit under MIN_LIMIT or a line cap under three raises ValueError."""
    with pytest.raises(ValueError, match="limit"):
        split_message("text", MIN_LIMIT - 1)
    with pytest.raises(ValueError, match="max_lines"):
        split_message("text", 100, max_lines=2)


def test_paragraph_break_is_preferred_to_a_later_line_break() -> None:
    """With a paragraph break and a later line break both in reach, the cut is at the paragraph."""
    text = "First paragraph.\n\nSecond line one\nsecond line two"
    assert split_message(text, 40) == ["First paragraph.", "Second line one\nsecond line two"]


def test_paragraph_break_that_costs_a_message_loses_to_a_later_line_break() -> None:
    """A paragraph break is not taken when cutting there would need one more message."""
    # This text used to give three chunks, cut at the paragraph break; two suffice.
    text = "First paragraph.\n\nSecond line one\nsecond line two\nsecond line three"
    expected = ["First paragraph.\n\nSecond line one", "second line two\nsecond line three"]
    assert split_message(text, 40) == expected


LINE = ("lorem ipsum " * 9)[:98] + "."  # 99 characters


def lines(count: int) -> str:
    return "\n".join([LINE] * count)


def test_an_early_paragraph_break_does_not_multiply_messages() -> None:
    """A short opening paragraph and 13 000 characters of long paragraphs take four messages, not seven."""
    body = "\n\n".join([lines(44), lines(44), lines(42)])
    assert len(body) >= 13_000
    text = "Start.\n\n" + body
    chunks = split_message(text, 4096)
    assert len(chunks) == 4
    assert all(len(c) > 3900 for c in chunks[:-1])
    check_chunks(text, chunks, 4096, None)


def test_no_tiny_first_or_middle_chunk_when_a_fuller_split_exists() -> None:
    """A paragraph break that would leave a tiny chunk before the last gives way to a fuller cut."""
    first = "Start.\n\n" + lines(40) + "\n" + "x" * 90
    assert [len(c) for c in split_message(first, 4096)] == [4007, 90]
    middle = lines(40) + "\n\n" + LINE + "\n\n" + lines(40)
    chunks = split_message(middle, 4096)
    assert len(chunks) == 3
    assert all(len(c) >= 4096 // 8 for c in chunks[:-1])
    check_chunks(middle, chunks, 4096, None)


def test_line_break_is_preferred_to_a_space() -> None:
    """Without a paragraph break the cut falls at the last line break that fits, not mid-line."""
    text = "alpha beta\ngamma delta epsilon zeta eta"
    assert split_message(text, 30) == ["alpha beta", "gamma delta epsilon zeta eta"]


def test_long_line_is_cut_at_a_sentence_end_or_a_space() -> None:
    """An over-long line is cut after a sentence when one ends late enough, else at a space."""
    text = "This is one sentence. And here is another one that runs on"
    assert split_message(text, 30) == ["This is one sentence.", "And here is another one that", "runs on"]
    assert split_message("aaa bbb ccc ddd eee fff", 16) == ["aaa bbb ccc ddd", "eee fff"]


def test_only_a_word_longer_than_the_limit_is_hard_cut() -> None:
    """Words are never split unless one alone exceeds the limit."""
    text = "short " + "x" * 40 + " tail"
    chunks = split_message(text, 16)
    assert chunks == ["short", "x" * 16, "x" * 16, "x" * 8 + " tail"]


def test_code_block_is_closed_and_reopened_with_its_language() -> None:
    """A block longer than a message is cut at a line inside it, closed, and reopened as ```python."""
    code = "\n".join(f"value_{i} = {i}" for i in range(10))
    text = f"```python\n{code}\n```"
    chunks = split_message(text, 60)
    assert len(chunks) > 1
    for chunk in chunks:
        lines = chunk.split("\n")
        assert lines[0] == "```python"
        assert lines[-1] == "```"
        assert len(chunk) <= 60
    check_chunks(text, chunks, 60, None)


def test_tilde_fences_are_closed_with_tildes() -> None:
    """A ~~~ block is closed with ~~~ and reopened with its own opening line."""
    text = "~~~~ sh\n" + "\n".join(f"echo {i}" for i in range(8)) + "\n~~~~"
    chunks = split_message(text, 40)
    assert all(c.startswith("~~~~ sh\n") and c.endswith("\n~~~~") for c in chunks)
    check_chunks(text, chunks, 40, None)


def test_cut_before_a_code_block_is_preferred_to_one_inside() -> None:
    """When a boundary outside the block fits, the block starts a new message instead of being split."""
    text = "Here is the code:\n```js\nlet a = 1;\nlet b = 2;\n```"
    assert split_message(text, 45) == ["Here is the code:", "```js\nlet a = 1;\nlet b = 2;\n```"]


def test_no_chunk_ends_with_an_empty_block() -> None:
    """An opening fence line is never left alone at the end of a chunk with only a closing line."""
    text = "Intro words here\n```py\n" + "x = 1\n" * 6 + "```"
    for chunk in split_message(text, 30):
        assert not re.search(r"```py\n```", chunk)


def test_block_cut_just_before_its_closing_line_is_not_reopened_empty() -> None:
    """When only blank lines and the closing fence remain, the added closing line stands for it."""
    text = "```\n" + "a" * 10 + "\n\n\n```\nafter"
    assert split_message(text, 18) == ["```\n" + "a" * 10 + "\n```", "after"]


def test_line_cap_is_respected_including_added_fence_lines() -> None:
    """With max_lines, every chunk, reopened fences included, has at most that many lines."""
    text = "```\n" + "\n".join(str(i) for i in range(20)) + "\n```\nafter"
    chunks = split_message(text, 2000, max_lines=5)
    assert all(c.count("\n") < 5 for c in chunks)
    assert chunks[0] == "```\n0\n1\n2\n```"
    check_chunks(text, chunks, 2000, 5)


def test_unclosed_fence_is_closed_in_every_chunk() -> None:
    """A block the model never closed still gets a closing line in each chunk of a split."""
    text = "```\n" + "line\n" * 10
    chunks = split_message(text, 20)
    assert all(c.endswith("\n```") for c in chunks)
    check_chunks(text, chunks, 20, None)


def test_fence_line_longer_than_the_limit_degrades_within_limits() -> None:
    """An opening line longer than a message is cut like text and every chunk stays within the limit."""
    text = "```" + "x" * 50 + "\ncode line\n```\nafter"
    chunks = split_message(text, 20)
    check_chunks(text, chunks, 20, None)


def test_long_language_is_reopened_as_the_bare_marker() -> None:
    """A reopening line that would take over half the limit is shortened to the marker."""
    text = "```" + "l" * 20 + "\n" + "\n".join(f"row {i}" for i in range(10)) + "\n```"
    chunks = split_message(text, 40)
    assert chunks[0].startswith("```" + "l" * 20 + "\n")
    assert all(c.startswith("```\n") for c in chunks[1:])
    check_chunks(text, chunks, 40, None)


def test_indented_fence_keeps_its_indentation_when_closed() -> None:
    """A fence inside a list item is closed and reopened with its own indentation."""
    text = "1. Run:\n   ```bash\n" + "\n".join(f"   step {i}" for i in range(8)) + "\n   ```"
    chunks = split_message(text, 50)
    # The block starts in the first chunk: cutting before it would take four messages instead of three.
    assert len(chunks) == 3
    assert chunks[0].startswith("1. Run:\n   ```bash\n") and chunks[0].endswith("\n   ```")
    assert all(c.startswith("   ```bash\n") and c.endswith("\n   ```") for c in chunks[1:])
    check_chunks(text, chunks, 50, None)


def test_realistic_reply_fills_messages() -> None:
    """A long prose reply for Telegram is split into few, well-filled chunks."""
    paragraph = " ".join(["The quick brown fox jumps over the lazy dog."] * 12)
    text = "\n\n".join([paragraph] * 20)
    chunks = split_message(text, 4096)
    assert len(chunks) == 3
    assert all(len(c) > 3000 for c in chunks[:-1])
    check_chunks(text, chunks, 4096, None)


def test_huge_single_line_splits_in_linear_time() -> None:
    """A 200k-character line with a tiny limit finishes quickly (no quadratic rescans)."""
    text = "x" * 200_000
    started = time.perf_counter()
    chunks = split_message(text, 16)
    assert time.perf_counter() - started < 5
    assert len(chunks) == 12_500 and "".join(chunks) == text


def test_split_is_deterministic() -> None:
    """The same input always gives the same chunks."""
    text = "para one\n\n```c\nint x;\nint y;\n```\n" * 5
    assert split_message(text, 30, max_lines=4) == split_message(text, 30, max_lines=4)


# --- properties -----------------------------------------------------------------------------------

PROSE = st.text(alphabet="abcdefgh*_[]().,!?<>&", min_size=1, max_size=14)
LANGS = st.sampled_from(["", "python", "js", "c", "bash", "text"])


@st.composite
def markdown_documents(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    """Paragraphs, list items and fenced blocks; also returns each code line's opening fence line."""
    blocks: list[str] = []
    code_fences: dict[str, str] = {}
    for block_no in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["para", "list", "code", "code"]))
        if kind == "code":
            indent = draw(st.sampled_from(["", "  "]))
            marker = draw(st.sampled_from(["```", "````", "~~~"]))
            opener = f"{indent}{marker}{draw(LANGS)}"
            lines = []
            for line_no in range(draw(st.integers(0, 12))):
                words = draw(st.lists(st.text(alphabet="xyz=+();", min_size=1, max_size=8), max_size=6))
                lines.append(" ".join([f"{indent}b{block_no}l{line_no}", *words]))
                code_fences[lines[-1]] = opener
            blocks.append("\n".join([opener, *lines, f"{indent}{marker}"]))
        else:
            rows = draw(st.lists(st.lists(PROSE, min_size=1, max_size=12), min_size=1, max_size=4))
            prefix = "- " if kind == "list" else ""
            blocks.append("\n".join(prefix + " ".join(words) for words in rows))
    separators = draw(st.lists(st.sampled_from(["\n", "\n\n", "\n\n\n"]), min_size=len(blocks)))
    text = "".join(block + sep for block, sep in zip(blocks, separators, strict=False))
    return text, code_fences


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    doc=markdown_documents(),
    limit=st.integers(MIN_LIMIT, 200),
    max_lines=st.none() | st.integers(3, 12),
)
def test_markdown_splits_keep_every_invariant(
    doc: tuple[str, dict[str, str]], limit: int, max_lines: int | None
) -> None:
    """Chunks are within both limits, non-blank, fence-balanced, and together hold the whole text."""
    text, _ = doc
    check_chunks(text, split_message(text, limit, max_lines=max_lines), limit, max_lines)


@settings(max_examples=200, deadline=None)
@given(doc=markdown_documents(), limit=st.integers(40, 300), max_lines=st.none() | st.integers(3, 12))
def test_code_lines_stay_inside_their_own_language_block(
    doc: tuple[str, dict[str, str]], limit: int, max_lines: int | None
) -> None:
    """Every whole code line lands inside a fence opened by its block's own opening line."""
    text, code_fences = doc
    for chunk in split_message(text, limit, max_lines=max_lines):
        lines = chunk.split("\n")
        for index, line in enumerate(lines):
            if line in code_fences:
                assert open_fence_after("\n".join(lines[:index]), limit) == code_fences[line]


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet="ab .!\t\n`~é", max_size=400),
    limit=st.integers(MIN_LIMIT, 40),
    max_lines=st.none() | st.integers(3, 6),
)
def test_arbitrary_text_degrades_gracefully(text: str, limit: int, max_lines: int | None) -> None:
    """Any mix of backticks, tildes, spaces and newlines, at small limits, still keeps every invariant."""
    check_chunks(text, split_message(text, limit, max_lines=max_lines), limit, max_lines)
