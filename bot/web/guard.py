"""The console's door: the login and logout pages, the session every other page needs (but the
sign-up's), the CSRF token every form must carry, and the security headers on every response."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote

from aiohttp import web

from bot.config.web_sections import WebConfig
from bot.core.media import size_text
from bot.store.web_accounts import WebSession
from bot.web.auth import FAILURE_WINDOW, SESSION_SECONDS, Logins, same_token
from bot.web.rendering import Renderer

SESSION_COOKIE = "switchboard_session"
# The login form's own token (no session yet): the form carries it and a cookie does; they must match.
LOGIN_COOKIE = "switchboard_login"
SESSION_KEY = web.RequestKey("session", WebSession)  # where a request carries its session
# No inline script or style, nothing from elsewhere, no framing, forms only to ourselves.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# How big a request body may be (the app's own limit): forms only, a login, a button, a message.
BODY_LIMIT = 64 * 1024
# A route that takes more (the chat's uploads) says so: its limit for a request, None for the default.
BodyLimit = Callable[[web.Request], int | None]


def no_body_limit(request: web.Request) -> int | None:
    return None


def see_other(location: str) -> web.Response:
    """A redirect after a form (303: the browser follows it with a GET)."""
    return web.Response(status=303, headers={"Location": location})


@dataclass(frozen=True, slots=True)
class Door:
    """Logs people in and out and lets only their sessions through."""

    config: WebConfig
    logins: Logins
    renderer: Renderer
    body_limit: BodyLimit = no_body_limit
    signup_open: Callable[[], bool] = lambda: False  # the sign-up page exists (the login links it)

    @property
    def base(self) -> str:
        return self.config.base_path

    def routes(self, app: web.Application) -> None:
        app.router.add_get(f"{self.base}/login", self.login_page)
        app.router.add_post(f"{self.base}/login", self.log_in)
        app.router.add_post(f"{self.base}/logout", self.log_out)

        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await self.guard(request, handler)

        app.middlewares.append(guard)
        app.on_response_prepare.append(self.headers)

    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """A session for every page but the login and the static files; a POST without the
        session's CSRF token is refused (403) before any handler sees it."""
        path = request.path
        if path in (f"{self.base}/login", f"{self.base}/signup") or path.startswith(f"{self.base}/static/"):
            return await handler(request)
        session = await self.logins.session(request.cookies.get(SESSION_COOKIE))
        if session is None:
            if request.method in ("GET", "HEAD"):
                raise web.HTTPSeeOther(f"{self.base}/login?next={quote(request.path_qs, safe='')}")
            raise web.HTTPForbidden(text="not logged in")
        if session.role != "admin" and not self._chat_only_path(path):
            if request.method in ("GET", "HEAD"):
                raise web.HTTPSeeOther(f"{self.base}/chat")
            raise web.HTTPForbidden(text="this account may use the chat only")
        if request.method != "POST":
            request[SESSION_KEY] = session
            return await handler(request)
        request = await self._read_form(request)
        form = await request.post()
        try:
            token = form.get("csrf")
            if not same_token(token if isinstance(token, str) else None, session.csrf_token):
                raise web.HTTPForbidden(text="the form's CSRF token is missing or wrong; reload the page")
            request[SESSION_KEY] = session
            return await handler(request)
        finally:
            for value in form.values():  # a file sent with the form waits in a temporary file
                if isinstance(value, web.FileField):
                    value.file.close()

    async def _read_form(self, request: web.Request) -> web.Request:
        """The request with its form read, under its route's body limit: a bigger body is refused
        (413) with what the limit is, before any of it is kept."""
        limit = self.body_limit(request)
        if limit is not None and limit != request.client_max_size:
            request = request.clone(client_max_size=limit)
        limit = request.client_max_size

        def too_large() -> web.HTTPRequestEntityTooLarge:
            return web.HTTPRequestEntityTooLarge(
                max_size=limit, actual_size=request.content_length or 0,
                text=f"Too big to send: this form takes at most {size_text(limit)}; nothing was sent.")

        if request.content_length is not None and request.content_length > limit:
            raise too_large()
        try:
            await request.post()
        except web.HTTPRequestEntityTooLarge:
            raise too_large() from None
        return request

    def _chat_only_path(self, path: str) -> bool:
        """What a chat-only account may open: the chat (its page, posts, stream) and the logout."""
        chat = f"{self.base}/chat"
        return path in (chat, f"{self.base}/logout") or path.startswith(f"{chat}/")

    async def headers(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "same-origin"
        if not request.path.startswith(f"{self.base}/static/"):
            response.headers["Cache-Control"] = "no-store"
        if self.config.secure:
            response.headers["Strict-Transport-Security"] = "max-age=31536000"

    async def login_page(self, request: web.Request) -> web.Response:
        return self._login_form(request, error=None)

    def _login_form(self, request: web.Request, *, error: str | None, status: int = 200) -> web.Response:
        return self.form_page(request, "login.html", status=status, error=error,
                              next=self._next(request.query.get("next")), signup=self.signup_open())

    def form_page(
        self, request: web.Request, template: str, *, status: int = 200, **values: object
    ) -> web.Response:
        """A page whose form is sent without a session (the login, the sign-up): its token is in
        the form and in a cookie, and the two must match (`form_values`)."""
        token = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(32)
        response = self.renderer.page(template, None, status=status, login_token=token, **values)
        self._cookie(response, LOGIN_COOKIE, token, max_age=3600)
        return response

    async def form_values(self, request: web.Request) -> dict[str, str]:
        """A session-less form's fields, once its token matches its cookie's (else 403)."""
        form = await request.post()
        values = {name: value for name, value in form.items() if isinstance(value, str)}
        expected = request.cookies.get(LOGIN_COOKIE)
        if expected is None or not same_token(values.get("csrf"), expected):
            raise web.HTTPForbidden(text="the form's token is missing or wrong; reload the page")
        return values

    def logged_in(self, location: str, token: str) -> web.Response:
        """The answer to a login or a sign-up: its session's cookie, and on to `location`."""
        response = see_other(location)
        self._cookie(response, SESSION_COOKIE, token, max_age=SESSION_SECONDS)
        response.del_cookie(LOGIN_COOKIE, path=self.base or "/")
        return response

    async def log_in(self, request: web.Request) -> web.Response:
        values = await self.form_values(request)
        login = await self.logins.log_in(values.get("name", "").strip(), values.get("password", ""),
                                         self.client_address(request))
        if login.limited:
            response = self._login_form(request, status=429, error="Too many failed logins: try again "
                                        f"in {FAILURE_WINDOW // 60} minutes.")
            response.headers["Retry-After"] = str(FAILURE_WINDOW)
            return response
        if login.token is None:
            return self._login_form(request, status=401, error="Wrong name or password.")
        return self.logged_in(self._next(values.get("next")), login.token)

    async def log_out(self, request: web.Request) -> web.Response:
        token = request.cookies.get(SESSION_COOKIE)
        if token:
            await self.logins.log_out(token)
        response = see_other(f"{self.base}/login")
        response.del_cookie(SESSION_COOKIE, path=self.base or "/")
        return response

    def client_address(self, request: web.Request) -> str:
        """The client's address: the proxy's last X-Forwarded-For entry when trusted, else the peer."""
        forwarded = request.headers.get("X-Forwarded-For") if self.config.trust_forwarded else None
        if forwarded:
            return forwarded.split(",")[-1].strip() or "unknown"
        return request.remote or "unknown"

    def _next(self, wanted: str | None) -> str:
        """Where a login leads: a page of ours (never another site's), else the overview."""
        home = f"{self.base}/"
        if not wanted or not wanted.startswith(home) or wanted.startswith("//") or "\\" in wanted:
            return home
        return wanted

    def _cookie(self, response: web.StreamResponse, name: str, value: str, *, max_age: int) -> None:
        response.set_cookie(name, value, max_age=max_age, path=self.base or "/", httponly=True,
                            samesite="Strict", secure=self.config.secure)

