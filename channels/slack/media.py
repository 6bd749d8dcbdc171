"""Files shared to the bot on Slack: each one's `url_private` fetched with the bot token (scope
`files:read`), asked of `files.info` first when the event left it out, then taken in as on the
other platforms (`bot.media.intake`: the caps, the download, the copy kept by hash). Audio clips
are heard when a `transcribe` role is set; videos are noted.

A Slack file URL answered without a valid token is Slack's sign-in page (HTTP 200, text/html), not
an error: a page where a file was asked for is a failed download. The token goes to Slack alone: a
file only linked in Slack (Google Drive, Dropbox: its `url_private` is that service's URL) is not
fetched, and is stored as not downloaded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from ipaddress import ip_address
from urllib.parse import urlsplit

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.core.errors import BotError, describe
from bot.core.media import Media
from bot.core.messages import InboundMessage
from bot.intake.channel import Intake
from bot.media.intake import Offer, notice, take_all, worth_a_turn
from bot.models.voice import hear, with_transcript
from channels.slack.normalise import SlackFile, SlackMessage, read_file

Fetch = Callable[[SlackFile], Callable[[], Awaitable[bytes]]]
log = structlog.get_logger("switchboard.slack")


class FileRefused(BotError):
    """Slack answered a file's URL with something other than the file (its sign-in page)."""


async def described(client: AsyncWebClient, file: SlackFile) -> SlackFile:
    """A file as files.info describes it, where the event left out its URL (and name and type)."""
    if file.url is not None:
        return file
    try:
        found = (await client.files_info(file=file.id)).get("file") or {}
    except (SlackApiError, OSError, aiohttp.ClientError, TimeoutError) as exc:
        log.warning("files.info failed; the file is noted as not downloaded", file_id=file.id,
                    error=describe(exc))
        return file
    return read_file(found) or file


def slack_hosted(url: str, api_base: str) -> bool:
    """Whether a file URL is Slack's own (files.slack.com beside slack.com/api/), so the bot token
    may go with it: the API's scheme and port, and its domain (its host where that is an address)."""
    file, api = urlsplit(url), urlsplit(api_base)
    host, api_host = (file.hostname or ""), (api.hostname or "")
    try:
        ip_address(api_host)
        domain = api_host
    except ValueError:
        domain = ".".join(api_host.split(".")[-2:])
    try:
        same_port = file.port == api.port
    except ValueError:  # a port that is no number
        return False
    return file.scheme == api.scheme and same_port and (host == domain or host.endswith("." + domain))


def fetcher(session: aiohttp.ClientSession, token: str, api_base: str) -> Fetch:
    """The download of a file: its URL with the bot token, where the URL is Slack's."""

    def download_of(file: SlackFile) -> Callable[[], Awaitable[bytes]]:
        async def download() -> bytes:
            if file.url is None:
                raise FileRefused(f"no URL for {file.id}")
            if not slack_hosted(file.url, api_base):
                raise FileRefused(f"{file.id} is kept outside Slack ({urlsplit(file.url).hostname}); "
                                  "the bot token goes to Slack only")
            async with session.get(file.url, headers={"Authorization": f"Bearer {token}"}) as response:
                response.raise_for_status()
                if response.content_type == "text/html" and (file.mime or "") != "text/html":
                    raise FileRefused("Slack answered the file's URL with a page (the token was not taken)")
                return await response.read()

        return download

    return download_of


def offers(msg: SlackMessage, fetch: Fetch) -> list[Offer | Media]:
    """The files to fetch and the placeholders of what is only noted, in message order."""
    found: list[Offer | Media] = []
    for file in msg.files:
        mime = (file.mime or "").split(";")[0].strip().lower() or None
        if mime is not None and mime.startswith("video/"):
            found.append(Media("video", "unsupported", name=file.name))
        elif file.kind == "slack_audio" or (mime is not None and mime.startswith("audio/")):
            voice = file.kind == "slack_audio"  # a clip recorded in Slack
            found.append(Offer("voice" if voice else "audio", fetch(file), size=file.size, mime=mime,
                               name=None if voice else file.name))
        else:
            kind = "photo" if mime is not None and mime.startswith("image/") else "document"
            found.append(Offer(kind, fetch(file), size=file.size, mime=mime, name=file.name,
                               width=file.width, height=file.height))
    return found


async def with_media(
    msg: SlackMessage, inbound: InboundMessage, intake: Intake, client: AsyncWebClient, fetch: Fetch,
) -> tuple[InboundMessage, str | None]:
    """The message with its files taken in, and the notice its sender gets (DMs only)."""
    limits = intake.media_limits()
    msg = replace(msg, files=tuple([await described(client, file) for file in msg.files]))
    items, heard = await hear(offers(msg, fetch), limits, intake.transcriber())
    media = await take_all(items, limits, intake.keep_file)
    text = with_transcript(inbound.text, heard)
    starts = inbound.starts_turn and worth_a_turn(text, media)
    told = notice(media) if msg.direct else None
    return replace(inbound, text=text, media=media, starts_turn=starts), told
