"""Files shared to the bot on Slack end to end: the real slack-bolt and slack_sdk against the stand-in,
each file's url_private fetched with the bot token (files.info asked first where the event leaves
the URL out), taken in under the [media] caps and sent to the model as content blocks."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from bot.config import Config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest
from bot.testing.slack_api import SlackStandIn
from channels.slack.media import slack_hosted
from tests import test_slack
from tests.harness import reply_requests
from tests.test_slack import ALICE, DM_ALICE, settled, slack_daemon

slack, slack_config = test_slack.slack, test_slack.slack_config  # the fixtures, shared
PNG = b"\x89PNG\r\n\x1a\n" + b"p" * 500
NOTES = "shopping: eggs, flour\n"
DM = f"agent:main:slack:direct:{ALICE}"


def blocks(request: RecordedRequest, kind: str) -> list[dict[str, Any]]:
    return [b for m in request.messages if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == kind]


async def stored_media(config: Config) -> list[Any]:
    async with Store.open(config.database_path()) as store:
        return [m.media for m in await store.history(DM, 20) if m.role == "user"]


async def test_a_picture_and_a_text_file_reach_the_model_as_blocks(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """A picture shared with words, and a text file shared alone whose event left its URL out: both
    are fetched with the bot token (the second after files.info) and reach the model as an image
    block and a text document; each message is answered once."""
    config = slack_config()
    async with slack_daemon(config) as daemon:
        slack.share(DM_ALICE, ALICE, "fridge.png", PNG, "image/png", text="what should I buy?")
        await slack.wait_for(lambda: slack.sent)
        slack.share(DM_ALICE, ALICE, "notes.txt", NOTES.encode(), "text/plain", complete=False)
        await slack.wait_for(lambda: len(slack.sent) == 2)
        await settled(slack, daemon)

    first, second = reply_requests(api)
    (image,) = blocks(first, "image")
    assert image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]) == PNG
    assert any("what should I buy?" in block["text"] for block in blocks(first, "text"))
    (notes,) = blocks(second, "document")
    assert notes["source"] == {"type": "text", "media_type": "text/plain", "data": NOTES}
    assert [c.args["file"] for c in slack.calls_of("files.info")] == [list(slack.files)[1]]
    assert [authorised for _, authorised in slack.downloads] == [True, True]
    assert [[m.status for m in media] for media in await stored_media(config)] == [["kept"], ["kept"]]


async def test_an_oversize_file_is_refused_without_a_download(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """A file over the [media] cap, by the size Slack states, is refused in the DM naming the limit
    and never fetched; the message is stored with its placeholder."""
    config = slack_config()
    config = config.model_copy(update={"media": config.media.model_copy(update={"max_file_bytes": 100})})
    pdf = b"%PDF-1.4\n" + b"0" * 400
    async with slack_daemon(config) as daemon:
        slack.share(DM_ALICE, ALICE, "big.pdf", pdf, "application/pdf")
        await slack.wait_for(lambda: slack.sent)
        await settled(slack, daemon)

    assert slack.texts_to(DM_ALICE) == [
        "Sorry, that file is too big for me (409 B, over the 100 B limit), so I haven't opened it."]
    assert slack.downloads == [] and api.count == 0
    ((media,),) = await stored_media(config)
    assert (media.kind, media.status, media.name) == ("document", "too_large", "big.pdf")


async def test_the_file_url_without_the_bot_token_is_slacks_sign_in_page(slack: SlackStandIn) -> None:
    """The stand-in, as Slack: a file's URL fetched without the token answers 200 with a page."""
    event = slack.share(DM_ALICE, ALICE, "a.png", PNG, "image/png")
    async with aiohttp.ClientSession() as session, session.get(event["files"][0]["url_private"]) as page:
        assert (page.status, page.content_type) == (200, "text/html")
    assert slack.downloads == [(event["files"][0]["id"], False)]


async def test_a_file_kept_outside_slack_never_gets_the_bot_token(
    slack: SlackStandIn, api: AnthropicStandIn, slack_config: Callable[..., Config]
) -> None:
    """A file only linked in Slack (kept on Google Drive: its url_private is the Drive URL) is not
    fetched with the bot token, which goes to Slack alone; the words with it are still answered and
    the file is stored as not downloaded."""
    seen: list[str | None] = []

    async def drive_file(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(text=NOTES)

    drive = web.Application()
    drive.router.add_get("/file/{name}", drive_file)
    runner = web.AppRunner(drive, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/file/notes.txt"
    config = slack_config()
    try:
        async with slack_daemon(config) as daemon:
            slack.share(DM_ALICE, ALICE, "notes.txt", NOTES.encode(), "text/plain", text="read this",
                        external_url=url)
            await slack.wait_for(lambda: slack.sent)
            await settled(slack, daemon)
    finally:
        await runner.cleanup()

    assert f"Bearer {slack.bot_token}" not in seen
    (request,) = reply_requests(api)
    assert "read this" in str(request.messages[-1]["content"])
    ((media,),) = await stored_media(config)
    assert (media.name, media.status) == ("notes.txt", "failed")


def test_the_bot_token_goes_to_slacks_file_hosts_only() -> None:
    """files.slack.com beside slack.com/api/ (and the stand-in's own address) take the token; another
    host, plain http or another port do not."""
    api = "https://slack.com/api/"
    assert slack_hosted("https://files.slack.com/files-pri/T1-F1/a.png", api)
    assert not slack_hosted("https://docs.google.com/document/d/1/edit", api)
    assert not slack_hosted("https://files.slack.com.example.org/a.png", api)
    assert not slack_hosted("http://files.slack.com/files-pri/T1-F1/a.png", api)
    assert slack_hosted("http://127.0.0.1:4000/files-pri/T1-F1/a.png", "http://127.0.0.1:4000/api/")
    assert not slack_hosted("http://127.0.0.1:4001/file/a.png", "http://127.0.0.1:4000/api/")
