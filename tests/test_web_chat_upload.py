"""Pictures and files sent with the web chat's form, through a real socket: the upload goes through
the same media intake as a platform's attachment, reaches the model as a content block, is refused
under the `[media]` caps with the note the other platforms store, and shows in the history."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import aiohttp

from bot.core.media import Media
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from tests.harness import reply_requests, router_of
from tests.test_media_discord import PNG, blocks
from tests.test_web import browser, free_port
from tests.test_web_chat import ADA_KEY, chat_config, chat_daemon, chat_form, log_in, with_accounts

NOTES = "shopping: eggs, flour\n"


def form(csrf: str, nonce: str, text: str, data: bytes, name: str, mime: str) -> aiohttp.FormData:
    """The chat form as a browser sends it with a file picked (multipart/form-data)."""
    body = aiohttp.FormData()
    body.add_field("csrf", csrf)
    body.add_field("nonce", nonce)
    body.add_field("text", text)
    body.add_field("file", data, filename=name, content_type=mime)
    return body


async def upload(client: aiohttp.ClientSession, url: str, text: str, data: bytes, name: str,
                 mime: str) -> tuple[int, dict[str, Any]]:
    """Post a message with a file as the page's script does; (status, the JSON answer)."""
    _, csrf, nonce = await chat_form(client, url)
    async with client.post(f"{url}/chat", data=form(csrf, nonce, text, data, name, mime),
                           headers={"Accept": "application/json"}) as response:
        return response.status, await response.json()


async def stored_user_messages(db: Path) -> list[tuple[str, tuple[Media, ...]]]:
    async with Store.open(db) as store:
        return [(m.text, m.media) for m in await store.history(ADA_KEY, 50) if m.role == "user"]


async def test_an_uploaded_picture_reaches_the_model_as_an_image_block_and_shows_after_a_reload(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """A picture posted with the form is kept by its hash and sent to the model as an image block
    (its real type) beside the text; a text file as a text document; a reload shows both labels."""
    await with_accounts(db, ada="admin")
    config = chat_config(make_config, api, free_port())
    async with chat_daemon(config) as (daemon, url), browser() as client:
        await log_in(client, url)
        status, answer = await upload(client, url, "what is in my fridge?", PNG, "fridge.png", "image/png")
        assert (status, answer["stored"], answer["notice"]) == (200, True, None)
        assert answer["shown"] == "[photo]\nwhat is in my fridge?"
        await router_of(daemon).idle()
        status, answer = await upload(client, url, "", NOTES.encode(), "notes.txt", "text/plain")
        assert (status, answer["stored"]) == (200, True)
        await router_of(daemon).idle()
        html, _, _ = await chat_form(client, url)

    first, second = reply_requests(api)
    (image,) = blocks(first, "image")
    assert image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == PNG
    (notes,) = blocks(second, "document")
    assert notes["source"] == {"type": "text", "media_type": "text/plain", "data": NOTES}
    (picture_text, (picture,)), (_, (kept_notes,)) = await stored_user_messages(db)
    assert picture_text == "what is in my fridge?"
    assert (picture.kind, picture.status, picture.mime) == ("photo", "kept", "image/png")
    assert picture.size == len(PNG)
    assert picture.sha256 is not None and kept_notes.name == "notes.txt"
    assert "[photo]\nwhat is in my fridge?" in html and "[file: notes.txt, 22 B]" in html


async def test_an_upload_over_the_cap_is_stored_as_a_note_and_the_account_is_told(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """A picture over `max_photo_bytes` is not kept: the message is stored with its words and the
    too-big note, the model reads the note, and the page says why (in the answer and after a reload)."""
    await with_accounts(db, ada="admin")
    config = chat_config(make_config, api, free_port())
    config = config.model_copy(update={"media": config.media.model_copy(update={"max_photo_bytes": 100})})
    async with chat_daemon(config) as (daemon, url), browser() as client:
        await log_in(client, url)
        status, answer = await upload(client, url, "look at this", PNG, "big.png", "image/png")
        await router_of(daemon).idle()
        html, _, _ = await chat_form(client, url)

    told = "Sorry, that picture is too big for me (508 B, over the 100 B limit), so I haven&#39;t opened it."
    assert (status, answer["stored"]) == (200, True)
    assert answer["notice"] == told.replace("&#39;", "'")
    ((text, (refused,)),) = await stored_user_messages(db)
    assert text == "look at this"
    assert (refused.status, refused.note, refused.sha256) == ("too_large", "over the 100 B limit", None)
    (request,) = reply_requests(api)
    assert blocks(request, "image") == []
    assert "[photo — not opened: over the 100 B limit]" in str(request.messages[-1]["content"])
    assert told in html and "look at this" in html


async def test_a_file_type_not_opened_is_noted_and_the_form_works_without_javascript(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """A plain multipart post (no script) with a file of a type not opened is stored with its note
    and redirected to the chat, which tells what can be opened; a lone such file starts no turn."""
    await with_accounts(db, ada="admin")
    config = chat_config(make_config, api, free_port())
    async with chat_daemon(config) as (daemon, url), browser() as client:
        await log_in(client, url)
        _, csrf, nonce = await chat_form(client, url)
        body = form(csrf, nonce, "", b"PK\x03\x04zip", "a.zip", "application/zip")
        async with client.post(f"{url}/chat", data=body, allow_redirects=False) as done:
            assert done.status == 303
        await router_of(daemon).idle()
        html, _, _ = await chat_form(client, url)

    ((text, (noted,)),) = await stored_user_messages(db)
    assert (text, noted.status, noted.name) == ("", "unsupported", "a.zip")
    assert "I can&#39;t open that type of file" in html and "[file: a.zip, 7 B" in html
    assert reply_requests(api) == []


async def test_the_chat_takes_a_body_over_the_console_limit_up_to_the_media_cap_and_refuses_more(
    make_config: Any, api: AnthropicStandIn, db: Path
) -> None:
    """The chat's POST takes a file bigger than the console's 64 KB form limit; a body over the
    largest `[media]` cap plus the form's room is refused (413) with the limit, nothing stored;
    other forms keep the small limit."""
    await with_accounts(db, ada="admin")
    config = chat_config(make_config, api, free_port())
    caps = {"max_photo_bytes": 1000, "max_file_bytes": 1000, "max_text_bytes": 100_000}
    config = config.model_copy(update={"media": config.media.model_copy(update=caps)})
    text = ("notes " * 16_000).encode()  # 96 KB: over the console's limit, under the text cap
    async with chat_daemon(config) as (daemon, url), browser() as client:
        await log_in(client, url)
        status, answer = await upload(client, url, "read this", text, "long.txt", "text/plain")
        assert (status, answer["stored"], answer["notice"]) == (200, True, None)
        await router_of(daemon).idle()
        _, csrf, nonce = await chat_form(client, url)
        huge = form(csrf, nonce, "and this", b"x" * 500_000, "huge.txt", "text/plain")
        async with client.post(f"{url}/chat", data=huge, headers={"Accept": "application/json"}) as refused:
            assert refused.status == 413
            said = await refused.text()
        assert said == "Too big to send: this form takes at most 362 KB; nothing was sent."
        async with client.post(f"{url}/pairing", data={"csrf": csrf, "code": "x" * 100_000}) as other:
            assert other.status == 413
        assert (await chat_form(client, url))[0]  # the server is still there

    assert [text for text, _ in await stored_user_messages(db)] == ["read this"]
