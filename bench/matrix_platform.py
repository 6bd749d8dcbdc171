"""The real Synapse as the benches' Matrix platform: a homeserver, a bot account, people each in a
direct chat with it, and a counting proxy between the daemon and the homeserver.

The daemon talks to the proxy (its `homeserver`); the proxy passes every request on to Synapse and
notes, from the homeserver's answers, what an outside observer needs: each answered `/sync` of the
bot (a contact: the daemon is reading), and each event the bot's sends created, by event id, so a
send repeated with its transaction id (which Synapse answers with the first event) counts once;
an `m.replace` edit replaces its event's text. The people write to Synapse directly, so they can
write while the daemon is down.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bot.testing.matrix_user import MatrixUser
from bot.testing.synapse import MatrixAccount, SynapseServer

_HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive"})


@dataclass
class Sent:
    """One event the bot created: its text (the latest edit's), when it was created and last edited."""

    text: str
    room: str
    at: float
    edited_at: float | None = None


@dataclass
class MatrixWorld:
    """Synapse, the bot's account, its people and the proxy's notes."""

    synapse: SynapseServer
    bot: MatrixAccount
    people: list[MatrixUser]
    rooms: list[str]  # person i's direct chat with the bot
    proxy_url: str = ""
    syncs: int = 0  # /sync answers the bot received
    sent: dict[str, Sent] = field(default_factory=dict)  # event id → what the room shows
    failed_pushes: list[str] = field(default_factory=list)
    grew: asyncio.Event = field(default_factory=asyncio.Event)  # set when the bot created an event
    requests: Counter[str] = field(default_factory=Counter)  # the daemon's, by kind ("PUT typing")
    _pushes: set[asyncio.Task[None]] = field(default_factory=set)

    def push(self, person: int, text: str) -> None:
        """Person `person` writes `text` in their direct chat (sent in the background)."""
        task = asyncio.get_running_loop().create_task(self._send(person, text))
        self._pushes.add(task)
        task.add_done_callback(self._pushes.discard)

    async def _send(self, person: int, text: str) -> None:
        try:
            await self.people[person].send(self.rooms[person], text)
        except Exception as exc:  # noted: the bench reports it, the marker would count as lost
            self.failed_pushes.append(f"{text}: {exc}")

    async def pushed(self) -> None:
        """Every write handed to Synapse."""
        while self._pushes:
            await asyncio.gather(*list(self._pushes), return_exceptions=True)

    def note(self, method: str, path: str, sent_body: bytes, status: int, answer: bytes, *,
             alive: bool) -> None:
        """One answered request; `alive`: the daemon that asked is still connected (a killed
        daemon's long poll is answered after its death, and is no contact)."""
        self.requests[f"{method} {kind_of(path)}"] += 1
        if status != 200:
            return
        if method == "GET" and path.endswith("/sync"):
            self.syncs += alive
            return
        if method != "PUT" or "/send/m.room.message/" not in path:
            return
        try:
            content, event = json.loads(sent_body), json.loads(answer)
        except ValueError:
            return
        room = urllib.parse.unquote(path.split("/rooms/")[1].split("/")[0])
        now = time.monotonic()
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace" and relates.get("event_id") in self.sent:
            edited = self.sent[relates["event_id"]]
            edited.text, edited.edited_at = content["m.new_content"]["body"], now
            return
        self.sent.setdefault(str(event.get("event_id")), Sent(str(content.get("body")), room, now))
        self.grew.set()


def kind_of(path: str) -> str:
    """A client-server API path by what it does: "send", "typing", "sync", "members", …"""
    for kind in ("send", "typing", "members", "joined_members", "displayname", "receipt", "redact",
                 "messages", "whoami", "join", "leave", "versions"):
        if f"/{kind}/" in path or path.endswith(f"/{kind}"):
            return kind
    return path.rstrip("/").rpartition("/")[2]


@asynccontextmanager
async def _proxy(world: MatrixWorld, upstream: str) -> AsyncIterator[str]:
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            async with session.request(request.method, upstream + request.path_qs, data=body or None,
                                       headers=headers) as answer:
                data = await answer.read()
                status, out = answer.status, {k: v for k, v in answer.headers.items()
                                              if k.lower() not in _HOP}
        except aiohttp.ClientError as exc:  # Synapse gone (the bench is ending)
            return web.Response(status=502, text=str(exc))
        alive = request.transport is not None and not request.transport.is_closing()
        world.note(request.method, request.path, body, status, data, alive=alive)
        return web.Response(body=data, status=status, headers=out)

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", forward)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        await session.close()


@asynccontextmanager
async def matrix_world(people: int, synapse: SynapseServer | None = None) -> AsyncIterator[MatrixWorld]:
    """A bot and `people` people, each in a direct chat the bot has joined (before any daemon runs:
    its first start then takes no history), behind the counting proxy; on `synapse` when given (a
    test's), else on a Synapse of its own, started and stopped here."""
    own = synapse is None
    synapse = synapse or SynapseServer()
    if own:
        await asyncio.to_thread(synapse.start)
    users: list[MatrixUser] = []
    try:
        bot = synapse.register("bench-bot" if own else None)
        async with MatrixUser(synapse.base_url, bot) as as_bot:
            rooms = []
            for n in range(people):
                user = MatrixUser(synapse.base_url, synapse.register(f"person{n}" if own else None))
                users.append(user)
                room = await user.create_room(invite=(bot.user_id,), direct=True)
                await as_bot.join(room)
                rooms.append(room)
        world = MatrixWorld(synapse, bot, users, rooms)
        async with _proxy(world, synapse.base_url) as url:
            world.proxy_url = url
            try:
                yield world
            finally:
                await world.pushed()
    finally:
        for user in users:
            await user.__aexit__(None, None, None)
        if own:
            await asyncio.to_thread(synapse.stop)


def config_section(world: MatrixWorld, **extra: Any) -> str:
    people = ", ".join(f'"{p.user_id}"' for p in world.people)
    lines = [f'[channels.matrix]\nenabled = true\nhomeserver = "{world.proxy_url}"\n'
             f'user_id = "{world.bot.user_id}"\nallow_from = [{people}]\nmax_reply_age = 3600\n']
    lines += [f"{key} = {json.dumps(value)}\n" for key, value in extra.items()]
    return "".join(lines)


class MatrixPlatform:
    """bench.crash_loop's view of Matrix: a warm-up first (the bot's first start takes no
    history, so each person's first message goes through a running daemon)."""

    name, warm_up = "matrix", True

    def __init__(self, world: MatrixWorld) -> None:
        self.world = world

    def config_section(self, users: int) -> str:
        return config_section(self.world)

    def env(self) -> dict[str, str]:
        return {"MATRIX_ACCESS_TOKEN": self.world.bot.access_token}

    def command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "bot", "run", "--config", str(config)]

    def contacts(self) -> int:
        return self.world.syncs

    def push(self, user: int, text: str) -> bool:
        self.world.push(user, text)
        return True

    def sent_texts(self) -> list[str]:
        return [sent.text for sent in self.world.sent.values()]
