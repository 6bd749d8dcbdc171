"""What a Matrix message carries besides text: its `mxc://` file fetched over authenticated media
(`GET /_matrix/client/v1/media/download/{server}/{id}`, the bot's token in the header; the
unauthenticated `/_matrix/media/v3/download` only on a homeserver older than Matrix 1.11), read
no further than the `[media]` cap allows, then kept by content hash like every platform's
(`bot.media.intake`). Audio and voice go to `bot.models.voice`; videos are noted, not fetched."""

from __future__ import annotations

from dataclasses import replace

from mautrix.client import ClientAPI
from mautrix.types import ContentURI

from bot.config import MediaConfig
from bot.core.media import Media
from bot.core.messages import InboundMessage
from bot.intake.channel import Intake
from bot.media.intake import Download, Offer, notice, take_all, worth_a_turn
from bot.models.voice import hear, with_transcript
from channels.matrix.normalise import MatrixFile, MatrixMessage

_READ = 64 * 1024


def offers(file: MatrixFile, client: ClientAPI, limits: MediaConfig) -> list[Offer | Media]:
    """The file to fetch, or the placeholder of one only noted (a video)."""
    if file.kind == "video":
        return [Media("video", "unsupported", duration=file.duration, name=file.name)]
    # The largest cap bounds the read; the file's own cap is checked on what was read.
    cap = max(limits.max_photo_bytes, limits.max_file_bytes, limits.max_text_bytes)
    return [Offer(file.kind, downloader(client, file.url, cap), size=file.size, mime=file.mime,
                  name=file.name, width=file.width, height=file.height, duration=file.duration)]


def downloader(client: ClientAPI, url: str, cap: int) -> Download:
    """Fetch `url`, reading at most one byte past `cap` (a file over it is refused as too large,
    whatever size the event claimed)."""

    async def download() -> bytes:
        authenticated = (await client.versions()).supports_at_least("v1.11")
        address = client.api.get_download_url(ContentURI(url), authenticated=authenticated)
        headers = {"Authorization": f"Bearer {client.api.token}"} if authenticated else {}
        data = bytearray()
        async with client.api.session.get(address, headers=headers, params={"allow_redirect": "true"},
                                          raise_for_status=True) as response:
            async for part in response.content.iter_chunked(_READ):
                data += part
                if len(data) > cap:
                    break
        return bytes(data)

    return download


async def with_media(
    msg: MatrixMessage, inbound: InboundMessage, intake: Intake, client: ClientAPI,
) -> tuple[InboundMessage, str | None]:
    """The message with its file taken in, and the notice its sender gets (direct chats only)."""
    if msg.file is None:
        return inbound, None
    limits = intake.media_limits()
    items, heard = await hear(offers(msg.file, client, limits), limits, intake.transcriber())
    media = await take_all(items, limits, intake.keep_file)
    text = with_transcript(inbound.text, heard)
    starts = inbound.starts_turn and worth_a_turn(text, media)
    told = notice(media) if msg.direct else None
    return replace(inbound, text=text, media=media, starts_turn=starts), told
