"""Files on the Slack stand-in: someone shares a file (a `file_share` message with its `files`),
`files.info` describes it, and its `url_private` serves the bytes to the bot token only; without
one it answers Slack's sign-in page (HTTP 200, text/html), as Slack does."""

from __future__ import annotations

import secrets

from aiohttp import web

from bot.testing.slack_values import Json, Timestamps, channel_type

SIGN_IN_PAGE = "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in</body></html>"


class SlackFiles:
    """The files half of `SlackStandIn`."""

    bot_token: str
    team_id: str
    bot_user_id: str
    history: dict[str, list[Json]]
    _ts: Timestamps
    _port: int

    def __init__(self) -> None:
        self.files: dict[str, Json] = {}  # file id -> the file object files.info gives
        self.file_data: dict[str, bytes] = {}
        self.downloads: list[tuple[str, bool]] = []  # (file id, with the bot token)

    def dispatch(self, event: Json) -> object:
        raise NotImplementedError  # SocketMode's

    def share(self, channel: str, user_id: str, name: str, data: bytes, mime: str, *, text: str = "",
              thread_ts: str | None = None, complete: bool = True, subtype: str | None = None,
              external_url: str | None = None) -> Json:
        """Someone shares a file (with `text`, maybe empty): the message event carries the file;
        `complete=False` leaves its URL out, as Slack does where files.info must be asked.
        `external_url`: a file kept elsewhere (Google Drive, Dropbox) and only linked in Slack, whose
        `url_private` is that URL, as Slack gives it."""
        file_id = "F" + secrets.token_hex(5).upper()
        url = f"http://127.0.0.1:{self._port}/files-pri/{self.team_id}-{file_id}/{name}"
        described: Json = {"id": file_id, "name": name, "title": name, "mimetype": mime,
                           "filetype": name.rsplit(".", 1)[-1], "size": len(data), "mode": "hosted",
                           "user": user_id, "url_private": url, "url_private_download": url + "?dl=1"}
        if external_url is not None:
            described.update(mode="external", is_external=True, external_type="gdrive",
                             url_private=external_url)
            del described["url_private_download"]
        if subtype is not None:
            described["subtype"] = subtype
        self.files[file_id], self.file_data[file_id] = described, data
        ts = self._ts.next(channel)
        partial = {"id": file_id, "mode": "hosted", "file_access": "check_file_info"}
        shared = described if complete else partial
        event: Json = {"type": "message", "subtype": "file_share", "channel": channel, "user": user_id,
                       "text": text, "ts": ts, "event_ts": ts, "channel_type": channel_type(channel),
                       "team": self.team_id, "files": [shared], "upload": False}
        if thread_ts is not None:
            event["thread_ts"] = thread_ts
        self.history.setdefault(channel, []).append({k: v for k, v in event.items()
                                                     if k not in ("channel", "event_ts", "channel_type")})
        self.dispatch(event)
        return event

    def _files_info(self, args: Json) -> Json:
        found = self.files.get(str(args.get("file", "")))
        return {"ok": True, "file": found} if found else {"ok": False, "error": "file_not_found"}

    async def _file_download(self, request: web.Request) -> web.Response:
        file_id = request.match_info["ref"].removeprefix(f"{self.team_id}-")
        header = request.headers.get("Authorization", "")
        authorised = header == f"Bearer {self.bot_token}"
        self.downloads.append((file_id, authorised))
        if not authorised:
            return web.Response(text=SIGN_IN_PAGE, content_type="text/html")
        if file_id not in self.file_data:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=self.file_data[file_id], content_type=self.files[file_id]["mimetype"])
