"""The whole configuration: `Config` holding every section, what starting needs, history limits."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field, field_validator

from bot.config.agent_sections import AgentEntry, AgentMessagesConfig, BindingConfig
from bot.config.channel_sections import (
    ChannelsConfig,
    ConsoleConfig,
    DiscordConfig,
    MatrixConfig,
    PlatformConfig,
    SlackConfig,
    TelegramConfig,
    WebChatConfig,
)
from bot.config.env_file import SecretsConfig
from bot.config.fields import Section
from bot.config.mcp_sections import McpServerConfig
from bot.config.provider_sections import (
    ROLE_NAMES,
    ProviderConfig,
    ProviderName,
    RolesConfig,
    anthropic_provider,
    split_spec,
)
from bot.config.routing import Routing
from bot.config.schedule_sections import RemindersConfig, ScheduleConfig, SchedulerConfig
from bot.config.schedule_spec import delivery_key
from bot.config.sections import (
    AgentConfig,
    AnthropicConfig,
    CompactionConfig,
    ConversationConfig,
    DatabaseConfig,
    LoggingConfig,
    MediaConfig,
    ModelPrice,
    RouterConfig,
    SemanticConfig,
)
from bot.config.tool_sections import ToolsConfig
from bot.config.web_sections import WebConfig
from bot.core.errors import ConfigError
from bot.core.session_key import SessionKey

ROLES = ROLE_NAMES
# The default models' prices per million tokens (the example config's [anthropic] models), so
# usage shows a cost out of the box; `[prices."<model>"]` replaces one or adds others.
DEFAULT_PRICES = {
    "claude-sonnet-5-5": ModelPrice(input=3.0, output=15.0),
    "claude-haiku-5-5": ModelPrice(input=1.0, output=5.0),
}


class Config(Section):
    agent: AgentConfig = AgentConfig()
    database: DatabaseConfig = DatabaseConfig()
    # Where secrets come from besides the environment: an env file beside config.toml.
    secrets: SecretsConfig = SecretsConfig()
    anthropic: AnthropicConfig = AnthropicConfig()
    conversation: ConversationConfig = ConversationConfig()
    semantic: SemanticConfig = SemanticConfig()
    media: MediaConfig = MediaConfig()
    compaction: CompactionConfig = CompactionConfig()
    channels: ChannelsConfig = ChannelsConfig()
    router: RouterConfig = RouterConfig()
    logging: LoggingConfig = LoggingConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    schedules: list[ScheduleConfig] = Field(default_factory=list)
    tools: ToolsConfig = ToolsConfig()
    reminders: RemindersConfig = RemindersConfig()
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    # Per model id: what a million tokens cost, for the usage estimates (/usage, `switchboard usage`);
    # the default models' are built in (an entry for the same model replaces it).
    prices: dict[str, ModelPrice] = Field(default_factory=lambda: dict(DEFAULT_PRICES))
    # Model services by name, and which of them answers each role (`bot.config.provider_sections`).
    providers: dict[ProviderName, ProviderConfig] = Field(default_factory=dict)
    roles: RolesConfig = RolesConfig()
    # More agents beside [agent] (the default one), which chats go to which, and how they may talk.
    agents: list[AgentEntry] = Field(default_factory=list)
    bindings: list[BindingConfig] = Field(default_factory=list)
    agent_messages: AgentMessagesConfig = AgentMessagesConfig()
    web: WebConfig = WebConfig()  # the browser console (bot.web)
    # Where the file was read from; relative paths inside it are resolved against its folder.
    source: str = Field(default="<defaults>", exclude=True)

    @field_validator("prices", mode="after")
    @classmethod
    def _with_default_prices(cls, prices: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
        return {**DEFAULT_PRICES, **prices}

    def database_path(self) -> Path:
        """The database file: configured path, else $XDG_STATE_HOME/switchboard, else ./state."""
        if self.database.path:
            return self.resolve(self.database.path)
        state = os.environ.get("XDG_STATE_HOME")
        base = Path(state) / "switchboard" if state else Path.cwd() / "state"
        return base / "switchboard.db"

    def resolve(self, path: str) -> Path:
        """A path from the file, made absolute relative to the file's folder."""
        candidate = Path(path).expanduser()
        if candidate.is_absolute() or self.source == "<defaults>":
            return candidate
        return Path(self.source).resolve().parent / candidate

    def channel(self, provider: str) -> ConsoleConfig | WebChatConfig | PlatformConfig | None:
        """A channel's section by name ("console", "web", "telegram", "telegram.work", ...), if it has one."""
        if provider == "console":
            return self.channels.console
        if provider == "web":
            return self.channels.web
        return self.chat_sections.get(provider)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Config:
        """A copy, without the channels worked out for this one (the update may change them)."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("chat_sections", None)
        return copied

    @cached_property
    def chat_sections(self) -> dict[str, PlatformConfig]:
        """Every Telegram, Discord and Slack channel (extra accounts too) by name; see ChannelsConfig."""
        return self.channels.chat_sections()

    def channel_agent(self, channel: str) -> str:
        """The agent a channel's account talks as (before finer bindings): its `agent`, else [agent]."""
        section = self.channel(channel)
        return (section.agent if section is not None else None) or self.agent.id

    def job_key(self, job: ScheduleConfig) -> SessionKey:
        """The session a job's output belongs to (`<channel>:<chat>` means the channel's agent)."""
        provider = job.deliver_to.partition(":")[0]
        return delivery_key(job.deliver_to, self.channel_agent(provider))

    def routing(self) -> Routing:
        """Which agent each message goes to: `[[bindings]]`, then each channel's `agent`; only
        channels that can receive anything (the console, which `chat` starts anyway, and the enabled
        bots), so `status` and `check-config` show no route through a disabled one."""
        channels = ["console", *(["web"] if self.web_chat else []),
                    *(name for name, section in self.chat_sections.items() if section.enabled)]
        return Routing(self.bindings, {name: self.channel_agent(name) for name in channels}, self.agent.id)

    @property
    def web_chat(self) -> bool:
        """Whether the web chat runs: `[channels.web]` and the console that serves it (`[web]`) on."""
        return self.channels.web.enabled and self.web.enabled

    def agent_ids(self) -> list[str]:
        """Every agent's id, the default ([agent]) first."""
        return [self.agent.id, *(entry.id for entry in self.agents)]

    def for_session(self, session_key: str) -> Config:
        """The config as the agent a session belongs to sees it (this one for an agent it lacks)."""
        agent = session_key.split(":", 2)[1] if session_key.startswith("agent:") else self.agent.id
        return self.for_agent(agent) if agent in self.agent_ids() else self

    def for_agent(self, agent_id: str) -> Config:
        """The config as one agent sees it: its identity, and its overrides over the sections."""
        if agent_id == self.agent.id:
            return self
        entry = next((e for e in self.agents if e.id == agent_id), None)
        if entry is None:
            raise KeyError(agent_id)
        base = self.agent
        agent = AgentConfig(
            id=entry.id, name=entry.name or entry.id, soul_file=entry.soul_file,
            memory_file=entry.memory_file,
            file_excerpt_chars=entry.file_excerpt_chars or base.file_excerpt_chars,
            files_total_chars=entry.files_total_chars or base.files_total_chars,
            timezone=entry.timezone or base.timezone,
        )
        return self.model_copy(update={
            "agent": agent,
            "conversation": _overlaid(self.conversation, entry.conversation),
            "roles": _overlaid(self.roles, entry.roles),
            "tools": _overlaid(self.tools, entry.tools),
        })

    def chat_channel(self, provider: str) -> PlatformConfig | None:
        """The section of a platform channel (access lists, admins, reply age), if it has one."""
        section = self.channel(provider)
        platforms = TelegramConfig | DiscordConfig | SlackConfig | MatrixConfig
        return section if isinstance(section, platforms) else None

    def secret_env_names(self) -> list[str]:
        """Names of the environment variables holding secrets, for redaction and `init`."""
        return [
            self.anthropic.api_key_env,
            *(env for section in self.chat_sections.values() for env in section.token_envs().values()),
            *(section.webhook_secret_env for section in self.chat_sections.values()
              if isinstance(section, TelegramConfig) and section.webhook_secret_env),
            *(name for server in self.mcp_servers for name in server.env),
            *(p.api_key_env for p in self.providers.values() if p.api_key_env),
            *((self.database.password_env or "PGPASSWORD",) if self.database.url else ()),
        ]

    def all_providers(self) -> dict[str, ProviderConfig]:
        """Every provider by name: the [anthropic] section as "anthropic" unless replaced."""
        return {"anthropic": anthropic_provider(self.anthropic), **self.providers}

    def uses_providers(self) -> bool:
        """Whether [providers] or [roles] is set (else the single Anthropic brain, as before)."""
        return bool(self.providers) or any(getattr(self.roles, r) is not None for r in ROLES)

    def role_chain(self, role: str) -> list[tuple[str, str]]:
        """The (provider, model) pairs of a role, in fallback order; [] for transcribe unset."""
        value = getattr(self.roles, role)
        if value is None and role == "summary":
            return self.role_chain("fast")
        if value is None:
            defaults = {"main": self.anthropic.model, "fast": self.anthropic.fast_model}
            return [("anthropic", defaults[role])] if role in defaults else []
        return [split_spec(spec) for spec in value]


def check_startable(config: Config) -> None:
    """What starting needs beyond valid values, read from this process's environment: a token for
    each enabled Telegram/Discord channel, a webhook secret for each Telegram one in webhook mode,
    and an enabled channel for each enabled job to deliver to.
    A ConfigError naming the key otherwise (`run` and `check-config` both ask)."""
    for name, section in config.chat_sections.items():
        for key, env in section.token_envs().items() if section.enabled else ():
            if not os.environ.get(env, "").strip():
                raise ConfigError(
                    config.source, f"{channel_key(name)}.{key}",
                    f"the environment variable {env} it names is not set; export the "
                    f"{_TOKEN_KINDS.get(key, 'bot token')} there or set "
                    f"{channel_key(name)}.enabled = false",
                )
        if section.enabled and isinstance(section, TelegramConfig) and section.mode == "webhook":
            webhook_secret(config, name)
        if section.enabled and isinstance(section, MatrixConfig):
            for key in ("homeserver", "user_id"):
                if getattr(section, key) is None:
                    raise ConfigError(config.source, f"{channel_key(name)}.{key}",
                                      "set: the Matrix account's homeserver URL and user id "
                                      "(\"https://matrix.example.org\", \"@bot:example.org\")")
    if config.channels.web.enabled and not config.web.enabled:
        raise ConfigError(config.source, "channels.web.enabled", "[web] enabled = true as well: the web "
                          "chat is a page of the web console (or set channels.web.enabled = false)")
    for index, job in enumerate(config.schedules):
        provider = config.job_key(job).provider
        target = config.channel(provider)
        if job.enabled and target is not None and not target.enabled:
            raise ConfigError(
                config.source, f'schedules[{index}] (id "{job.id}").deliver_to',
                f"a channel that is enabled; [{channel_key(provider)}] is not (enable it, or set "
                "enabled = false on this job)",
            )


_TOKEN_KINDS = {"app_token_env": "app token", "access_token_env": "access token",
                "signing_secret_env": "signing secret"}
# What Telegram accepts as a webhook's secret_token (setWebhook refuses anything else).
_WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")


def webhook_secret(config: Config, name: str) -> str:
    """The secret a webhook channel's requests must carry, read from the variable its section names;
    a ConfigError naming `webhook_secret_env` when it is unset or not what Telegram accepts."""
    section = config.chat_sections[name]
    env = section.webhook_secret_env if isinstance(section, TelegramConfig) else None
    where = f"{channel_key(name)}.webhook_secret_env"
    value = os.environ.get(env, "").strip() if env else ""
    if not env or not value:
        raise ConfigError(
            config.source, where,
            f"a variable holding the webhook secret; {env or 'it'} is not set (export 1-256 letters, "
            "digits, '_' or '-' there, or set mode = \"polling\")",
        )
    if not _WEBHOOK_SECRET.fullmatch(value):
        raise ConfigError(config.source, where, f"1-256 letters, digits, '_' or '-' in {env}, as "
                          "Telegram requires of a secret token; the value there has other characters")
    return value


def channel_key(name: str) -> str:
    """Where a channel's section is in the file: "channels.telegram.accounts.work" for "telegram.work"."""
    platform, _, account = name.partition(".")
    return f"channels.{platform}.accounts.{account}" if account else f"channels.{platform}"


_S = TypeVar("_S", bound=Section)


def _overlaid(base: _S, override: _S) -> _S:
    """`base` with the keys written in `override` (an agent's sub-table) put over it."""
    return base.model_copy(update={key: getattr(override, key) for key in override.model_fields_set})


def resolve_history_limit(config: Config, key: SessionKey) -> int | None:
    """The history limit (in user turns) for a session, or None for unlimited.

    Lookup order, first that is set: the per-DM entry, the channel's DM limit (direct chats),
    the per-chat settings (a Discord thread, then its channel; a Telegram group), the channel's
    limit (groups and channels), then `[conversation].history_limit`. A set value
    of 0 means "unlimited" at that level and ends the lookup.
    """
    section = config.channel(key.provider)
    value: int | None = None
    if section is not None:
        if key.is_direct:
            dms = getattr(section, "dms", {})
            dm_entry = dms.get(key.base().peer)
            if dm_entry is not None and dm_entry.history_limit is not None:
                value = dm_entry.history_limit
            else:
                value = section.dm_history_limit
        elif not isinstance(section, ConsoleConfig | WebChatConfig):
            overrides = [s.history_limit for s in section.settings_for(key) if s.history_limit is not None]
            value = overrides[0] if overrides else section.history_limit
    if value is None:
        value = config.conversation.history_limit
    return value or None
