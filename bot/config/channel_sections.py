"""The channel config sections: console, Telegram, Discord, Slack, Matrix and the web chat, their
access lists and per-chat settings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from bot.config.fields import (
    DmPolicy,
    EnvName,
    HttpUrl,
    IdKey,
    ListenAddress,
    MatrixKey,
    MatrixRoomId,
    MatrixUserId,
    NonNegInt,
    PlatformId,
    Policy,
    PosInt,
    Section,
    SlackId,
    SlackKey,
)
from bot.core.session_key import SessionKey


class DmConfig(Section):
    history_limit: NonNegInt | None = None


class ChatSettings(Section):
    """Overrides for one group (Telegram) or channel/thread (Discord)."""

    require_mention: bool | None = None
    history_limit: NonNegInt | None = None


# The agent a channel's messages go to unless a [[bindings]] entry says otherwise (unset: [agent]).
AgentRef = Annotated[str | None, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
# An extra bot of a platform: `[channels.telegram.accounts.<name>]`, the channel "telegram.<name>".
AccountName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")]


class ChatChannelConfig(Section):
    enabled: bool = False
    agent: AgentRef = None
    history_limit: NonNegInt | None = None
    dm_history_limit: NonNegInt | None = None
    dms: dict[IdKey, DmConfig] = Field(default_factory=dict)
    dm_policy: DmPolicy = "allowlist"
    allow_from: list[PlatformId] = Field(default_factory=list)
    # dm_policy = "pairing": seconds a stranger's pairing code stays valid.
    pairing_code_ttl: PosInt = 3600
    admins: list[PlatformId] = Field(default_factory=list)
    require_mention: bool = True
    # Messages older than this (seconds) when they reach us are stored but not answered, and a
    # restart resumes requests and undelivered replies only within it; 0 = no cap.
    max_reply_age: NonNegInt = 3600
    # "auto": replies are shown while they are written (a Telegram draft in private chats, else
    # one message edited in place); "off": sent once complete.
    streaming: Literal["auto", "off"] = "auto"

    def settings_for(self, key: SessionKey) -> list[ChatSettings]:
        """The per-chat overrides that apply to a session, most specific first."""
        return []

    def token_envs(self) -> dict[str, str]:
        """The variables holding this channel's tokens, by the key that names each."""
        return {"token_env": getattr(self, "token_env", "")}

    def requires_mention(self, key: SessionKey) -> bool:
        """Whether a group/channel message needs a mention (or reply, or command) to start a turn."""
        for settings in self.settings_for(key):
            if settings.require_mention is not None:
                return settings.require_mention
        return self.require_mention


class TelegramConfig(ChatChannelConfig):
    token_env: EnvName = "TELEGRAM_BOT_TOKEN"
    base_url: HttpUrl = "https://api.telegram.org/bot"
    group_policy: Policy = "allowlist"
    groups: list[PlatformId] = Field(default_factory=list)
    group_settings: dict[IdKey, ChatSettings] = Field(default_factory=dict)
    # How updates arrive: "polling" (getUpdates) or "webhook" (Telegram POSTs each to webhook_url,
    # served at webhook_listen; the secret Telegram sends back comes from webhook_secret_env).
    mode: Literal["polling", "webhook"] = "polling"
    webhook_listen: ListenAddress = "0.0.0.0:8443"
    webhook_url: HttpUrl | None = None
    webhook_secret_env: EnvName | None = None
    # More bots, each with its own token: the keys written in one override this section's.
    accounts: dict[AccountName, TelegramConfig] = Field(default_factory=dict)

    def settings_for(self, key: SessionKey) -> list[ChatSettings]:
        found = self.group_settings.get(key.peer)
        return [found] if found is not None else []


class DiscordGuildConfig(Section):
    """Who may talk to the bot in one guild; empty lists mean no restriction at that level."""

    channels: list[PlatformId] = Field(default_factory=list)
    users: list[PlatformId] = Field(default_factory=list)
    roles: list[PlatformId] = Field(default_factory=list)
    require_mention: bool | None = None


class DiscordConfig(ChatChannelConfig):
    token_env: EnvName = "DISCORD_BOT_TOKEN"
    guild_policy: Policy = "allowlist"
    guilds: dict[IdKey, DiscordGuildConfig] = Field(default_factory=dict)
    channel_settings: dict[IdKey, ChatSettings] = Field(default_factory=dict)
    allow_bots: bool = False
    # Several daemons splitting one bot's gateway: Discord gives a guild's events to shard
    # (guild_id >> 22) % shard_count and DMs to shard 0. Unset: one unsharded connection.
    shard_count: PosInt | None = None
    # The shards this daemon runs (unset with shard_count: all of them).
    shard_ids: list[NonNegInt] | None = None
    accounts: dict[AccountName, DiscordConfig] = Field(default_factory=dict)

    def settings_for(self, key: SessionKey) -> list[ChatSettings]:
        # A thread uses its own settings when configured, else its parent channel's.
        ids = [key.suffix_id, key.peer] if key.suffix_kind == "thread" else [key.peer]
        return [self.channel_settings[i] for i in ids if i is not None and i in self.channel_settings]


class SlackConfig(ChatChannelConfig):
    """A Slack app: its bot token (xoxb-) calls the Web API; in Socket Mode its app-level token
    (xapp-, scope connections:write) opens the socket, in HTTP mode Slack POSTs events to us, signed
    with the app's signing secret. Ids are Slack's (U…, C…, D…)."""

    bot_token_env: EnvName = "SLACK_BOT_TOKEN"
    app_token_env: EnvName = "SLACK_APP_TOKEN"
    # How events arrive: "socket" (Socket Mode, no public URL) or "http" (the Events API: Slack POSTs
    # each to the app's Request URL, served at webhook_listen + webhook_path; several daemons may sit
    # behind one load balancer), each request checked against the secret in signing_secret_env.
    mode: Literal["socket", "http"] = "socket"
    webhook_listen: ListenAddress = "0.0.0.0:3000"
    webhook_path: str = Field(default="/slack/events", pattern=r"^/[A-Za-z0-9._~/-]*$")
    signing_secret_env: EnvName = "SLACK_SIGNING_SECRET"
    base_url: HttpUrl = "https://slack.com/api/"
    allow_from: list[SlackId] = Field(default_factory=list)
    admins: list[SlackId] = Field(default_factory=list)
    dms: dict[SlackKey, DmConfig] = Field(default_factory=dict)
    # Channels (public and private) the bot answers in: "allowlist" (those in `channels`), "open"
    # (any it is a member of), "disabled" (DMs only).
    channel_policy: Policy = "allowlist"
    channels: list[SlackId] = Field(default_factory=list)
    channel_settings: dict[SlackKey, ChatSettings] = Field(default_factory=dict)
    allow_bots: bool = False
    accounts: dict[AccountName, SlackConfig] = Field(default_factory=dict)

    def settings_for(self, key: SessionKey) -> list[ChatSettings]:
        found = self.channel_settings.get(key.peer)
        return [found] if found is not None else []

    @property
    def token_env(self) -> str:
        """The bot token's variable (what other platforms call their one token)."""
        return self.bot_token_env

    def token_envs(self) -> dict[str, str]:
        if self.mode == "http":
            return {"bot_token_env": self.bot_token_env, "signing_secret_env": self.signing_secret_env}
        return {"bot_token_env": self.bot_token_env, "app_token_env": self.app_token_env}


class MatrixConfig(ChatChannelConfig):
    """A Matrix account on a homeserver, signed in with an access token. Ids are Matrix's
    (`@user:server`, `!room:server`). The bot joins only rooms `invite_policy` lets it be invited
    to; a room with the bot and one person is a direct chat, any other a room."""

    homeserver: HttpUrl | None = None
    user_id: MatrixUserId | None = None
    access_token_env: EnvName = "MATRIX_ACCESS_TOKEN"
    allow_from: list[MatrixUserId] = Field(default_factory=list)
    admins: list[MatrixUserId] = Field(default_factory=list)
    dms: dict[MatrixKey, DmConfig] = Field(default_factory=dict)
    # Whose invites are accepted: "allowlist" (users `dm_policy` lets in, and under "pairing" any
    # invite to a direct chat, so the stranger can be given a code), "open" (anyone's),
    # "disabled" (none). Refused invites are declined.
    invite_policy: Policy = "allowlist"
    # Rooms answered in: "open" (every room the bot was let in to), "allowlist" (those in
    # `rooms`), "disabled" (direct chats only).
    room_policy: Policy = "open"
    rooms: list[MatrixRoomId] = Field(default_factory=list)
    room_settings: dict[MatrixKey, ChatSettings] = Field(default_factory=dict)
    accounts: dict[AccountName, MatrixConfig] = Field(default_factory=dict)

    def settings_for(self, key: SessionKey) -> list[ChatSettings]:
        found = self.room_settings.get(key.peer)
        return [found] if found is not None else []

    @property
    def token_env(self) -> str:
        """The access token's variable (what other platforms call their one token)."""
        return self.access_token_env

    def token_envs(self) -> dict[str, str]:
        return {"access_token_env": self.access_token_env}


# A platform channel's section.
PlatformConfig = TelegramConfig | DiscordConfig | SlackConfig | MatrixConfig


class ConsoleConfig(Section):
    enabled: bool = True
    user_name: str = "you"
    # The console session is a DM, so only the DM limit applies; a group `history_limit` here
    # would silently do nothing, so it is not a key.
    dm_history_limit: NonNegInt | None = None
    agent: AgentRef = None


# A web console account's name (`switchboard web user add NAME`).
WebAccountName = Annotated[str, Field(pattern=r"^[a-z0-9_.-]{1,64}$")]


class WebChatConfig(Section):
    """The web chat: the console's accounts talking to the agent in the browser (`[web]` serves it).

    Admin accounts may always chat; chat-only accounts as `dm_policy` says: "open" (every account
    an admin made), "allowlist" (those in `allow_from`), "pairing" (those, and any an admin
    approved by the pairing code the chat page shows them), "disabled" (admins only).
    """

    enabled: bool = False
    agent: AgentRef = None
    dm_policy: DmPolicy = "open"
    allow_from: list[WebAccountName] = Field(default_factory=list)
    # Every web chat is one account's direct chat, so only DM limits apply.
    dm_history_limit: NonNegInt | None = None
    dms: dict[WebAccountName, DmConfig] = Field(default_factory=dict)


def platform_of(channel: str) -> str:
    """The platform of a channel name: "telegram" for "telegram" and for "telegram.work"."""
    return channel.partition(".")[0]


class ChannelsConfig(Section):
    console: ConsoleConfig = ConsoleConfig()
    telegram: TelegramConfig = TelegramConfig()
    discord: DiscordConfig = DiscordConfig()
    slack: SlackConfig = SlackConfig()
    matrix: MatrixConfig = MatrixConfig()
    web: WebChatConfig = WebChatConfig()

    def chat_sections(self) -> dict[str, PlatformConfig]:
        """Every platform channel by name, enabled or not: "telegram", "discord", and each extra
        account as "<platform>.<account>", its section the platform's with the account's keys over it
        (an account is enabled unless it says otherwise)."""
        found: dict[str, PlatformConfig] = {}
        sections: tuple[tuple[str, PlatformConfig], ...] = (
            ("telegram", self.telegram), ("discord", self.discord), ("slack", self.slack),
            ("matrix", self.matrix))
        for platform, section in sections:
            found[platform] = section.model_copy(update={"accounts": {}})
            for name, account in section.accounts.items():
                written = {key: getattr(account, key) for key in account.model_fields_set}
                found[f"{platform}.{name}"] = section.model_copy(
                    update={"enabled": True, **written, "accounts": {}})
        return found
