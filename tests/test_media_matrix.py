"""Matrix pictures and files end to end, against the real Synapse: a person uploads to the media
repository and posts `m.image` / `m.file`; the daemon fetches it over authenticated media
(`/_matrix/client/v1/media/download`) under the `[media]` caps, keeps it by hash, and the model
request carries it as a content block."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Callable
from typing import Any

from bot.config import Config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest
from bot.testing.matrix_user import MatrixUser
from bot.testing.synapse import MatrixAccount
from tests.harness import reply_requests, router_of
from tests.test_matrix import alice, bot_account, joined, matrix_config, matrix_daemon, replies  # noqa: F401


def png(width: int, height: int) -> bytes:
    """A real PNG of grey pixels (Synapse thumbnails what it is given)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


PICTURE = png(4, 3)
NOTES = "shopping: eggs, flour\n"


def blocks(request: RecordedRequest, kind: str) -> list[dict[str, Any]]:
    return [b for m in request.messages if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == kind]


async def direct_room(user: MatrixUser, bot: MatrixAccount) -> str:
    room = await user.create_room(invite=(bot.user_id,), direct=True)
    await joined(user, room, bot)
    return room


async def test_a_picture_and_a_text_file_reach_the_model_as_blocks(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,  # noqa: F811
    api: AnthropicStandIn,
) -> None:
    """A text file, then a captioned picture: both fetched from the media repository and kept; the
    picture's turn sends it as an image block (its real type, PNG) beside its caption, and the
    file, an earlier message of the chat, as a text document."""
    config = matrix_config(require_mention=True)
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await direct_room(alice, bot_account)
        await alice.send_file(room, NOTES.encode(), "text/plain", "notes.txt", msgtype="m.file")
        await replies(alice, room, bot_account)
        await alice.send_file(room, PICTURE, "image/png", "fridge.png", caption="what should I buy?",
                              info={"w": 4, "h": 3})
        await replies(alice, room, bot_account, 2)
        await router_of(daemon).idle()

    first, second = reply_requests(api)
    (notes,) = blocks(first, "document")
    assert notes["source"] == {"type": "text", "media_type": "text/plain", "data": NOTES}
    (image,) = blocks(second, "image")
    assert image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == PICTURE
    text = second.messages[-1]["content"][0]["text"]
    assert text.endswith("[photo: 4×3]\nwhat should I buy?")
    async with Store.open(config.database_path()) as store:
        mine = [m for m in await store.history(f"agent:main:matrix:direct:{alice.user_id}", 10)
                if m.role == "user"]
    assert [(m.text, [(f.kind, f.status, f.name) for f in m.media]) for m in mine] == [
        ("", [("document", "kept", "notes.txt")]),
        ("what should I buy?", [("photo", "kept", "fridge.png")])]


async def test_a_file_over_its_cap_is_refused_whatever_size_the_event_claims(
    matrix_config: Callable[..., Config], bot_account: MatrixAccount, alice: MatrixUser,  # noqa: F811
    api: AnthropicStandIn,
) -> None:
    """A PDF over `max_file_bytes` whose event says it is small: what was read is over the cap,
    the sender is told in one line naming the limit, the model is not asked, the message is
    stored with its placeholder."""
    config = matrix_config()
    config = config.model_copy(update={"media": config.media.model_copy(update={"max_file_bytes": 100})})
    pdf = b"%PDF-1.4\n" + b"0" * 400
    async with matrix_daemon(config, bot_account.access_token) as daemon:
        room = await direct_room(alice, bot_account)
        await alice.send_file(room, pdf, "application/pdf", "big.pdf", msgtype="m.file", info={"size": 10})
        (told,) = await replies(alice, room, bot_account)
        await router_of(daemon).idle()

    assert told["content"]["body"].startswith("Sorry, that file is too big for me (")
    assert "over the 100 B limit" in told["content"]["body"]
    assert api.count == 0
    async with Store.open(config.database_path()) as store:
        (stored,) = await store.history(f"agent:main:matrix:direct:{alice.user_id}", 10)
    ((media,),) = [stored.media]
    assert (media.kind, media.status, media.name) == ("document", "too_large", "big.pdf")
