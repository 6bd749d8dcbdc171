"""`doctor`'s platform checks: each Telegram bot's token (getMe) and, in webhook mode, the webhook
Telegram has on record; each Discord bot's token (a REST login, no gateway session) and the
privileged intents its application has enabled; each Slack app's bot token (auth.test) with the
scopes the channel needs, and its app-level token (apps.connections.open); each Matrix account's
homeserver (`/_matrix/client/versions`) and token (`/account/whoami`, the user it belongs to).

The platform libraries are imported inside the checks, only for a channel that is enabled.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import TYPE_CHECKING

from bot.cli.finding import Finding, failed, passed
from bot.config.root import channel_key
from bot.core.errors import describe

if TYPE_CHECKING:
    from telegram import WebhookInfo

    from bot.config import DiscordConfig, MatrixConfig, SlackConfig, TelegramConfig

# A webhook delivery that failed longer ago than this is history, not a problem now.
RECENT_WEBHOOK_ERROR = 3600.0

# Each privileged intent: its application flags (either one means enabled; "_limited" is what a bot
# in fewer than 100 servers has) and its name in the Developer Portal.
_PRIVILEGED = {
    "message_content": ("gateway_message_content", "Message Content Intent"),
    "members": ("gateway_guild_members", "Server Members Intent"),
    "presences": ("gateway_presence", "Presence Intent"),
}


async def check_telegram(name: str, section: TelegramConfig, *, daemon_running: bool) -> Finding:
    """getMe with the bot's token; with mode = "webhook", also getWebhookInfo."""
    from telegram import Bot
    from telegram.error import InvalidToken, NetworkError, TelegramError

    env = section.token_env
    token = os.environ.get(env, "").strip()
    if not token:
        return failed(name, f"environment variable {env} is not set", f"export the bot token from "
                      f"@BotFather in {env}, or set {channel_key(name)}.enabled = false")
    bot = Bot(token, base_url=section.base_url)
    try:
        await bot.initialize()  # getMe
        detail = f"@{bot.username} answers (getMe)"
        if section.mode == "webhook":
            return _webhook(name, section, detail, await bot.get_webhook_info(), daemon_running)
        return passed(name, detail)
    except InvalidToken:  # its message quotes the token: not shown
        return failed(name, f"Telegram refused the token in {env} (revoked, or mistyped)",
                      "get the bot's current token from @BotFather (/mybots → API Token) and export "
                      f"it in {env}")
    except NetworkError as exc:  # BadRequest and TimedOut are network errors too
        return failed(name, f"no good answer from {section.base_url} ({describe(exc)})",
                      f"check the network, a proxy, or {channel_key(name)}.base_url")
    except TelegramError as exc:
        return failed(name, f"Telegram answered {describe(exc)}",
                      "try again later; if it persists, see the log")
    finally:
        await bot.shutdown()


def _webhook(
    name: str, section: TelegramConfig, detail: str, info: WebhookInfo, daemon_running: bool
) -> Finding:
    """What Telegram's getWebhookInfo says about the webhook this channel serves."""
    want = section.webhook_url
    key = channel_key(name)
    if not info.url:
        if daemon_running:
            return failed(name, f"{detail}; no webhook is set although the daemon runs",
                          "restart the daemon; its log says why setWebhook failed")
        return passed(name, f"{detail}; no webhook set yet (the daemon sets {want} when it starts)")
    if info.url != want:
        return failed(name, f"{detail}; Telegram posts updates to {info.url}, not {want}",
                      f"restart the daemon (it sets {key}.webhook_url at start), or correct that key")
    waiting = f"{info.pending_update_count} update{'s' if info.pending_update_count != 1 else ''} waiting"
    error_at = info.last_error_date.timestamp() if info.last_error_date else None
    if error_at is not None and time.time() - error_at < RECENT_WEBHOOK_ERROR:
        ago = int(max(0.0, time.time() - error_at))
        return failed(name, f"{detail}; Telegram's last delivery to {want} failed {ago} s ago "
                            f"({info.last_error_message}); {waiting}",
                      f"make {want} reach {key}.webhook_listen ({section.webhook_listen}): proxy, "
                      "TLS certificate, firewall")
    return passed(name, f"{detail}; webhook {want} set, {waiting}")


async def check_discord(name: str, section: DiscordConfig) -> Finding:
    """A REST login with the bot's token, and the privileged intents the channel asks for enabled."""
    import aiohttp

    with warnings.catch_warnings():
        # discord.py imports the stdlib audioop (deprecated since 3.11) for voice, which we never use.
        warnings.simplefilter("ignore", DeprecationWarning)
        import discord
    # The intents the channel itself connects with, so this check asks for exactly those.
    from channels.discord.normalise import default_intents

    env = section.token_env
    token = os.environ.get(env, "").strip()
    if not token:
        return failed(name, f"environment variable {env} is not set",
                      f"export the bot token in {env}, or set {channel_key(name)}.enabled = false")
    intents = default_intents()
    client = discord.Client(intents=intents)
    try:
        async with client:
            await client.login(token)
            flags = client.application_flags
            user = client.user
    except discord.LoginFailure:
        return failed(name, f"Discord refused the token in {env} (401 Unauthorized: reset, or mistyped)",
                      f"Developer Portal → your application → Bot → Reset Token, and export it in {env}")
    except discord.HTTPException as exc:
        return failed(name, f"Discord answered HTTP {exc.status}: {exc.text}",
                      "try again later; if it persists, see discordstatus.com")
    except (aiohttp.ClientError, OSError) as exc:
        return failed(name, f"cannot reach Discord ({describe(exc)})",
                      "check the network or a proxy")
    missing = [portal for intent, (flag, portal) in _PRIVILEGED.items() if getattr(intents, intent)
               and not (getattr(flags, flag) or getattr(flags, f"{flag}_limited"))]
    who = f"{user} (id {user.id})" if user is not None else "the bot"
    if missing:
        return failed(name, f"{who} logs in, but {' and '.join(missing)} is off for it (Discord then closes "
                            "the gateway with 4014)",
                      f"Developer Portal → your application → Bot → Privileged Gateway Intents: turn on "
                      f"{' and '.join(missing)}")
    wanted = [portal for intent, (_, portal) in _PRIVILEGED.items() if getattr(intents, intent)]
    return passed(name, f"{who} logs in" + (f"; {', '.join(wanted)} enabled" if wanted else ""))


async def check_matrix(name: str, section: MatrixConfig) -> Finding:
    """The homeserver's spec versions (it is a Matrix homeserver, and one with authenticated
    media), then `/whoami` with the token: it must be `user_id`'s."""
    import aiohttp
    from mautrix import errors
    from mautrix.api import HTTPAPI
    from mautrix.client import ClientAPI

    failures = (errors.MatrixConnectionError, errors.MatrixRequestError, errors.MatrixResponseError, OSError)

    env, key = section.access_token_env, channel_key(name)
    token = os.environ.get(env, "").strip()
    if not token:
        return failed(name, f"environment variable {env} is not set",
                      f"export the bot account's access token in {env}, or set {key}.enabled = false")
    homeserver = str(section.homeserver or "").rstrip("/")
    async with aiohttp.ClientSession() as session:
        # Without the token: Synapse answers a bad one with 401 even here.
        client = ClientAPI(api=HTTPAPI(base_url=homeserver, token="", client_session=session))
        try:
            versions = await client.versions()
        except (*failures, ValueError) as exc:
            return failed(name, f"{homeserver} does not answer as a Matrix homeserver "
                                f"(/_matrix/client/versions: {describe(exc)})",
                          f"check {key}.homeserver (the client-server API's URL), the network or a proxy")
        spec = max(versions.versions, default=None, key=lambda v: (v.major, v.minor))
        media = "authenticated media" if versions.supports_at_least("v1.11") else "no authenticated media"
        serves = f"{homeserver} speaks Matrix {spec or 'of no known version'} ({media})"
        client.api.token = token
        try:
            who = await client.whoami()
        except errors.MatrixInvalidToken:
            return failed(name, f"{serves}; it refused the access token in {env} (logged out, or mistyped)",
                          f"sign the bot in anew (Element: Help & About → Access Token); export it in {env}")
        except failures as exc:
            return failed(name, f"{serves}; /account/whoami failed ({describe(exc)})",
                          "try again later; if it persists, see the homeserver's log")
    if section.user_id and who.user_id != section.user_id:
        return failed(name, f"{serves}; the token in {env} is {who.user_id}'s, not {section.user_id}'s",
                      f"export {section.user_id}'s access token in {env}, or correct {key}.user_id")
    return passed(name, f"{serves}; the token is {who.user_id}'s (whoami)")


async def check_slack(name: str, section: SlackConfig) -> Finding:
    """auth.test with the bot token and the scopes Slack says it carries (`x-oauth-scopes`), then
    apps.connections.open with the app-level token (auth.test does not take one); in HTTP mode the
    signing secret is only looked for (Slack has no call that checks it)."""
    import aiohttp
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    from channels.slack.scopes import NEEDED, OPTIONAL, granted

    key = channel_key(name)
    http = section.mode == "http"
    bot_env = section.bot_token_env
    app_env = section.signing_secret_env if http else section.app_token_env
    bot_token, app_token = os.environ.get(bot_env, "").strip(), os.environ.get(app_env, "").strip()
    for env, token, kind in ((bot_env, bot_token, "bot token (xoxb-…)"),
                             (app_env, app_token, "signing secret" if http else "app-level token (xapp-…)")):
        if not token:
            return failed(name, f"environment variable {env} is not set",
                          f"export the app's {kind} in {env}, or set {key}.enabled = false")
    async with aiohttp.ClientSession() as session:
        client = AsyncWebClient(token=bot_token, base_url=section.base_url, session=session)
        which = "bot token"
        try:
            auth = await client.auth_test()
            which = "app-level token"
            if not http:
                await client.apps_connections_open(app_token=app_token)
        except SlackApiError as exc:
            error = exc.response.get("error") or f"HTTP {exc.response.status_code}"
            env = bot_env if which == "bot token" else app_env
            step = "auth.test" if which == "bot token" else "apps.connections.open"
            return failed(name, f"Slack refused the {which} in {env} ({step}: {error})",
                          f"api.slack.com/apps → the app → {_SLACK_TOKEN_PAGE[which]}; export it in {env}")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return failed(name, f"cannot reach {section.base_url} ({describe(exc)})",
                          f"check the network, a proxy, or {key}.base_url")
    headers = {k.lower(): v for k, v in (auth.headers or {}).items()}
    scopes = granted(headers.get("x-oauth-scopes"))
    who = f"@{auth.get('user')} in {auth.get('team')}"
    missing = sorted(NEEDED - scopes)
    if missing:
        return failed(name, f"{who} answers (auth.test), but its bot token lacks {', '.join(missing)}",
                      "api.slack.com/apps → the app → OAuth & Permissions: add those bot scopes (the "
                      "manifest in docs/channels.md has them all) and reinstall the app")
    extra = sorted(OPTIONAL - scopes)
    note = f"; without {', '.join(extra)} (optional)" if extra else ""
    how = ("HTTP mode: the signing secret is set" if http
           else "the app-level token opens Socket Mode (apps.connections.open)")
    return passed(name, f"{who} answers (auth.test) with the scopes it needs{note}; {how}")


_SLACK_TOKEN_PAGE = {
    "bot token": "OAuth & Permissions → Bot User OAuth Token (reinstall the app if it was revoked)",
    "app-level token": "Basic Information → App-Level Tokens (one with connections:write)",
}
