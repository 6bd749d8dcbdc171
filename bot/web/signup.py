"""The sign-up page: under the web chat's `dm_policy = "pairing"` a visitor makes their own
chat-only account, is logged in, and is given a pairing code; the account may chat once an admin
approves the code (the pairing page, or `switchboard pairing approve CODE`), as a stranger on
Telegram may. Under any other policy, or without the web chat, there is no such page (404).

The form is sent without a session, so it carries the login form's token (a cookie and a field
that must match); sign-ups are counted per client address, as failed logins are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from bot.intake.channel import Channel
from bot.web.admin_pages import AdminStore
from bot.web.auth import FAILURE_WINDOW, MIN_PASSWORD
from bot.web.guard import Door
from channels.web.channel import PROVIDER, WebChatChannel


def signup_channel(channels: Mapping[str, Channel]) -> WebChatChannel | None:
    """The web chat when it takes sign-ups, else None."""
    channel = channels.get(PROVIDER)
    return channel if isinstance(channel, WebChatChannel) and channel.signup_open else None


@dataclass(frozen=True, slots=True)
class SignUp:
    """The sign-up routes, behind the door (which lets them through without a session)."""

    door: Door
    store: AdminStore
    channels: Mapping[str, Channel]

    def routes(self, app: web.Application) -> None:
        base = self.door.base
        app.router.add_get(f"{base}/signup", self.page)
        app.router.add_post(f"{base}/signup", self.sign_up)

    def _channel(self) -> WebChatChannel:
        channel = signup_channel(self.channels)
        if channel is None:
            raise web.HTTPNotFound(text="no sign-up here: accounts are made by an admin")
        return channel

    def _form(self, request: web.Request, *, error: str | None = None, name: str = "",
              status: int = 200) -> web.Response:
        return self.door.form_page(request, "signup.html", status=status, error=error, name=name,
                                   min_password=MIN_PASSWORD)

    async def page(self, request: web.Request) -> web.Response:
        self._channel()
        return self._form(request)

    async def sign_up(self, request: web.Request) -> web.Response:
        channel = self._channel()
        values = await self.door.form_values(request)
        name = values.get("name", "").strip()

        async def taken(account: str) -> bool:
            # A name the allowlist lets in, or one with a pairing on record (an approval outlives
            # a removed account), is not for a stranger to claim.
            return channel.listed(account) or bool(await self.store.pairings(provider=PROVIDER,
                                                                             user_id=account))

        login = await self.door.logins.sign_up(name, values.get("password", ""), values.get("again", ""),
                                               self.door.client_address(request), taken)
        if login.limited:
            response = self._form(request, status=429, name=name, error="Too many sign-ups from here: "
                                  f"try again in {FAILURE_WINDOW // 60} minutes.")
            response.headers["Retry-After"] = str(FAILURE_WINDOW)
            return response
        if login.token is None:
            problem = login.problem or "not possible"
            return self._form(request, status=400, name=name, error=problem[0].upper() + problem[1:] + ".")
        await channel.ask_pairing(name)
        return self.door.logged_in(f"{self.door.base}/chat", login.token)
