"""Privacy at every boundary, end to end through Telegram: the daemon with the real
python-telegram-bot against the Bot API stand-in and the real SDK against the Messages API stand-in
scripting `search_history`; what the tool hands the model is what the model could say in the chat."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from bot.config import Config
from bot.daemon.assembly import Daemon
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Text, ToolUse
from bot.testing.telegram_api import (
    TelegramStandIn,
    group_chat,
    mention_entities,
    message,
    private_chat,
    user,
)
from tests.harness import MODEL, config_data, echo, reply_requests, router_of
from tests.test_telegram import telegram_daemon
from tests.test_tool_loop import results

MakeConfig = Callable[[dict[str, Any]], Config]
BOT = "switchboard_bot"
ADA = user(42, "Ada", "ada")
BEA = user(7, "Bea")
# Telegram sends every anonymous group admin, in every group, as this one user.
ANONYMOUS_ADMIN = user(1087968824, "Group", "GroupAnonymousBot", is_bot=True)
FRIENDS = group_chat(-100123, "Friends", supergroup=True)
FAMILY = group_chat(-100456, "Family", supergroup=True)


class HeldStandIn(AnthropicStandIn):
    """The Messages API stand-in, able to hold the reply model's next answer until the test lets
    it go (the model still writing while the chat moves on)."""

    def __init__(self) -> None:
        super().__init__()
        self._holds: deque[asyncio.Event] = deque()

    def hold_next(self) -> asyncio.Event:
        """Hold the reply model's next answer until the returned event is set."""
        release = asyncio.Event()
        self._holds.append(release)
        return release

    async def _respond(
        self, request: web.Request, rec: RecordedRequest, response: Response
    ) -> web.StreamResponse:
        if rec.model == MODEL and self._holds:
            await self._holds.popleft().wait()
        return await super()._respond(request, rec, response)


@pytest.fixture
async def api() -> AsyncIterator[HeldStandIn]:
    async with HeldStandIn() as standin:
        standin.default = echo
        yield standin


@pytest.fixture
def telegram_config(
    api: HeldStandIn, tg: TelegramStandIn, make_config: MakeConfig, store_backend: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Config]:
    """Configs with Telegram on, Ada and Bea allowed in private, both groups allowed; the database
    is the backend's under test."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)

    def make(**telegram: Any) -> Config:
        tools = telegram.pop("tools", {})
        section = {"enabled": True, "base_url": tg.base_url, "allow_from": [42, 7],
                   "groups": [FRIENDS["id"], FAMILY["id"]], **telegram}
        return make_config(config_data(api, channels={"telegram": section}, tools=tools))

    return make


def push(tg: TelegramStandIn, chat: dict[str, Any], sender: dict[str, Any], text: str, *,
         mention: bool = False, sender_chat: dict[str, Any] | None = None) -> dict[str, Any]:
    """Push a message (mentioning the bot, or sent on behalf of `sender_chat`); the update."""
    if mention:
        text = f"@{BOT} {text}"
    data = message(chat, sender, text, message_id=tg.next_message_id(chat["id"]),
                   entities=mention_entities(text, BOT) if mention else None)
    if sender_chat is not None:
        data["sender_chat"] = sender_chat
    return tg.push("message", data)


async def settled(tg: TelegramStandIn, daemon: Daemon, last: dict[str, Any]) -> None:
    """Return once every update up to `last` is committed and every turn it started is over."""
    await tg.wait_for(lambda: tg.confirmed_offset > last["update_id"])
    await router_of(daemon).idle()


def searched(api: AnthropicStandIn) -> str:
    """What `search_history` handed the model in the latest turn (the model's next request)."""
    (result,) = results(reply_requests(api)[-1])
    return str(result["content"])


def search_for(query: str, answer: str = "Here is what I found.") -> tuple[Response, Response]:
    """The model searching the history for `query`, then answering."""
    return ToolUse((("search_history", {"query": query}),)), Text(answer)


async def test_a_private_chat_is_never_read_out_in_a_group(
    tg: TelegramStandIn, api: HeldStandIn, telegram_config: Callable[..., Config],
) -> None:
    """Ada's bank pin, told in her private chat, is not what a search in a group finds for her;
    and her private chat's search does not bring back what she said in the group."""
    api.script(Text("Noted."), *search_for("pin"), *search_for("pin"), model=MODEL)
    async with telegram_daemon(telegram_config()) as daemon:
        await settled(tg, daemon, push(tg, private_chat(ADA), ADA, "my bank pin is 4921"))
        push(tg, FRIENDS, ADA, "my locker pin at the gym is 1234")
        await settled(tg, daemon, push(tg, FRIENDS, ADA, "what is my pin?", mention=True))
        in_group = searched(api)
        await settled(tg, daemon, push(tg, private_chat(ADA), ADA, "what pins do I have?"))
        in_private = searched(api)

    assert "1234" in in_group  # her own words in this group are found
    assert "4921" not in in_group
    assert "4921" in in_private  # her own words in this private chat are found
    assert "1234" not in in_private and "locker" not in in_private


async def test_anonymous_admins_of_two_groups_are_not_one_person(
    tg: TelegramStandIn, api: HeldStandIn, view: Store, telegram_config: Callable[..., Config],
) -> None:
    """An anonymous admin's secret in one group is not found by an anonymous admin's search in
    another (Telegram sends both as the same user), and is stored as sent by that group's chat."""
    api.script(*search_for("vault"), model=MODEL)
    async with telegram_daemon(telegram_config()) as daemon:
        push(tg, FRIENDS, ANONYMOUS_ADMIN, "the vault code is 8812", sender_chat=FRIENDS)
        push(tg, FAMILY, ANONYMOUS_ADMIN, "our vault is empty", sender_chat=FAMILY)
        asked = push(tg, FAMILY, ANONYMOUS_ADMIN, "what is the vault code?", mention=True, sender_chat=FAMILY)
        await settled(tg, daemon, asked)
        found = searched(api)

    assert "8812" not in found
    assert "empty" in found  # what was said on behalf of this group is found here
    in_friends = await view.history(f"agent:main:telegram:group:{FRIENDS['id']}", 10)
    secret = [m for m in in_friends if m.role == "user"]
    assert [(m.sender_id, m.sender_name) for m in secret] == [(f"chat:{FRIENDS['id']}", "Friends")]


async def test_a_group_reply_belongs_to_who_asked_not_to_who_wrote_last(
    tg: TelegramStandIn, api: HeldStandIn, view: Store, telegram_config: Callable[..., Config],
) -> None:
    """Bea's message arriving while the answer to Ada is being written does not make it Bea's: Ada's
    search finds the answer, Bea's does not."""
    api.script(Text("Nothing rhymes with orange, but sporange comes close."),
               *search_for("sporange"), *search_for("sporange"), model=MODEL)
    group = f"agent:main:telegram:group:{FRIENDS['id']}"
    async with telegram_daemon(telegram_config()) as daemon:
        release = api.hold_next()
        push(tg, FRIENDS, ADA, "what rhymes with orange?", mention=True)
        await tg.wait_for(lambda: reply_requests(api))
        interjected = push(tg, FRIENDS, BEA, "lunch anyone?")
        await tg.wait_for(lambda: tg.confirmed_offset > interjected["update_id"])
        assert [m.text for m in await view.history(group, 10)][-1] == "lunch anyone?"
        release.set()
        await router_of(daemon).idle()
        replies = [m for m in await view.history(group, 10) if m.role == "assistant"]
        assert [m.text for m in replies] == ["Nothing rhymes with orange, but sporange comes close."]

        await settled(tg, daemon, push(tg, FRIENDS, ADA, "what did you answer me?", mention=True))
        for_ada = searched(api)
        await settled(tg, daemon, push(tg, FRIENDS, BEA, "what did you answer me?", mention=True))
        for_bea = searched(api)

    assert "sporange" in for_ada
    assert "sporange" not in for_bea
