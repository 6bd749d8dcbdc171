"""Configuration: config.toml read once and validated into typed, frozen models."""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from bot.errors import ConfigError, SessionKeyError
from bot.schedule_spec import SCHEDULE_CHANNELS as SCHEDULE_CHANNELS
from bot.schedule_spec import crontab_trigger, delivery_key
from bot.schedule_spec import parse_duration as parse_duration
from bot.session_key import SessionKey

NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
PosFloat = Annotated[float, Field(gt=0)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


def _id_text(value: Any) -> Any:
    # Ids are written as TOML integers (or strings); the core compares them as strings.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


PlatformId = Annotated[str, BeforeValidator(_id_text), Field(pattern=r"^-?[0-9]+$")]


def _numeric_key(value: str) -> str:
    if not value.lstrip("-").isdigit() or not value.isascii():
        raise ValueError("a numeric id as the key, such as \"123456789\" or \"-1001234567890\"")
    return value


# A table keyed by a chat, user, guild or channel id (TOML keys are strings).
IdKey = Annotated[str, AfterValidator(_numeric_key)]


def _http_url(value: str) -> str:
    # Checked here: the HTTP clients would refuse it only when the daemon first connects (Telegram
    # then retries forever; the Anthropic SDK raises mid-start).
    expected = "an http:// or https:// URL with a host, such as 'https://api.example.com'"
    if not value.isprintable() or any(ch.isspace() for ch in value):
        raise ValueError(expected)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(expected) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(expected)
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]
# The longest reply any Claude model writes is 128k tokens; more is a typo, not a wish.
MAX_REPLY_TOKENS = 128_000
# SQLite and the platforms' APIs hold 64-bit integers; a bigger one in the file is a typo.
_MAX_INT = 2**63 - 1
Policy = Literal["allowlist", "open", "disabled"]


class _Section(BaseModel):
    # inf and nan parse as TOML floats but no timeout, share or window means them.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class AgentConfig(_Section):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")] = "main"
    name: str = "Switchboard"
    soul_file: str | None = None
    memory_file: str | None = None
    file_excerpt_chars: PosInt = 4000
    # Soul and memory together: what is left after the soul file goes to the memory file.
    files_total_chars: PosInt = 8000
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError("an IANA timezone name such as 'Europe/Berlin'") from exc
        return value


class DatabaseConfig(_Section):
    path: str | None = None


class AnthropicConfig(_Section):
    api_key_env: EnvName = "ANTHROPIC_API_KEY"
    model: str = "claude-sonnet-5-5"
    fast_model: str = "claude-haiku-5-5"
    max_tokens: Annotated[int, Field(ge=1, le=MAX_REPLY_TOKENS)] = 1024
    timeout: PosFloat = 60.0
    max_retries: NonNegInt = 2
    base_url: HttpUrl | None = None

    def api_key(self) -> str | None:
        """The key from the environment variable this section names; never stored in the file."""
        return os.environ.get(self.api_key_env) or None


class ConversationConfig(_Section):
    enabled: bool = True
    lookback_count: PosInt = 25
    skip_selection_threshold: NonNegInt = 3
    use_selection: bool = True
    selection_model: str = "fast"
    selection_timeout: PosFloat = 30.0
    always_include_recent: NonNegInt = 5
    context_truncation: NonNegInt = 0
    context_recency_hours: Annotated[float, Field(ge=0)] = 0
    context_min_messages: NonNegInt = 10
    previous_tasks_count: NonNegInt = 3
    selection_fallback: Literal["recent", "all"] = "recent"
    history_limit: NonNegInt = 0
    # Token budget: the model's window (0: known model table, else 200 000), a reserve for the
    # system prompt and the reply, and the share of the window history may use.
    context_window: NonNegInt = 0
    reserve_tokens: NonNegInt = 20000
    history_share: Annotated[float, Field(gt=0, le=1)] = 0.5
    # Older messages matching the request (full-text search) offered to triage; 0 = off.
    recall_count: NonNegInt = 0


class CompactionConfig(_Section):
    """Summaries of a long session's older part, written by the fast model."""

    enabled: bool = True
    # Compact when the uncompacted history exceeds this share of the history budget.
    trigger_share: Annotated[float, Field(gt=0)] = 1.0
    keep_recent: NonNegInt = 10
    chunk_tokens: Annotated[int, Field(ge=500)] = 6000
    model: str = "fast"
    timeout: PosFloat = 60.0


class DmConfig(_Section):
    history_limit: NonNegInt | None = None


class ChatSettings(_Section):
    """Overrides for one group (Telegram) or channel/thread (Discord)."""

    require_mention: bool | None = None
    history_limit: NonNegInt | None = None


class _ChatChannelConfig(_Section):
    enabled: bool = False
    history_limit: NonNegInt | None = None
    dm_history_limit: NonNegInt | None = None
    dms: dict[IdKey, DmConfig] = Field(default_factory=dict)
    dm_policy: Policy = "allowlist"
    allow_from: list[PlatformId] = Field(default_factory=list)
    admins: list[PlatformId] = Field(default_factory=list)
    require_mention: bool = True
    # Messages older than this (seconds) when they reach us are stored but not answered, and a
    # restart resumes requests and undelivered replies only within it; 0 = no cap.
    max_reply_age: NonNegInt = 3600

    def settings_for(self, key: SessionKey) -> list[ChatSettings]:
        """The per-chat overrides that apply to a session, most specific first."""
        return []

    def requires_mention(self, key: SessionKey) -> bool:
        """Whether a group/channel message needs a mention (or reply, or command) to start a turn."""
        for settings in self.settings_for(key):
            if settings.require_mention is not None:
                return settings.require_mention
        return self.require_mention


class TelegramConfig(_ChatChannelConfig):
    token_env: EnvName = "TELEGRAM_BOT_TOKEN"
    base_url: HttpUrl = "https://api.telegram.org/bot"
    group_policy: Policy = "allowlist"
    groups: list[PlatformId] = Field(default_factory=list)
    group_settings: dict[IdKey, ChatSettings] = Field(default_factory=dict)

    def settings_for(self, key: SessionKey) -> list[ChatSettings]:
        found = self.group_settings.get(key.peer)
        return [found] if found is not None else []


class DiscordGuildConfig(_Section):
    """Who may talk to the bot in one guild; empty lists mean no restriction at that level."""

    channels: list[PlatformId] = Field(default_factory=list)
    users: list[PlatformId] = Field(default_factory=list)
    roles: list[PlatformId] = Field(default_factory=list)
    require_mention: bool | None = None


class DiscordConfig(_ChatChannelConfig):
    token_env: EnvName = "DISCORD_BOT_TOKEN"
    guild_policy: Policy = "allowlist"
    guilds: dict[IdKey, DiscordGuildConfig] = Field(default_factory=dict)
    channel_settings: dict[IdKey, ChatSettings] = Field(default_factory=dict)
    allow_bots: bool = False

    def settings_for(self, key: SessionKey) -> list[ChatSettings]:
        # A thread uses its own settings when configured, else its parent channel's.
        ids = [key.suffix_id, key.peer] if key.suffix_kind == "thread" else [key.peer]
        return [self.channel_settings[i] for i in ids if i is not None and i in self.channel_settings]


class ConsoleConfig(_Section):
    enabled: bool = True
    user_name: str = "you"
    # The console session is a DM, so only the DM limit applies; a group `history_limit` here
    # would silently do nothing, so it is not a key.
    dm_history_limit: NonNegInt | None = None


class ChannelsConfig(_Section):
    console: ConsoleConfig = ConsoleConfig()
    telegram: TelegramConfig = TelegramConfig()
    discord: DiscordConfig = DiscordConfig()


class RouterConfig(_Section):
    max_concurrent_turns: PosInt = 8
    shutdown_grace: PosFloat = 10.0


class SchedulerConfig(_Section):
    """How scheduled jobs run: catch-up after downtime, staleness, retries, failures, history."""

    # A run missed by at most this many seconds (daemon down, loop busy) still runs, once.
    misfire_grace: NonNegInt = 600
    # A run whose output would arrive later than this after its time is not delivered; 0 = no cap.
    stale_after: NonNegInt = 1800
    retries: NonNegInt = 2
    retry_delay: Annotated[float, Field(ge=0)] = 30.0
    timeout: PosFloat = 120.0
    max_failures: PosInt = 5
    history_runs: NonNegInt = 1
    quiet_marker: Annotated[str, Field(min_length=1)] = "NO_REPLY"
    # How often the daemon looks for `switchboard jobs run ID` requests.
    request_poll: PosFloat = 2.0


class ScheduleConfig(_Section):
    """One `[[schedules]]` entry: a briefing the daemon runs on a cron or interval schedule."""

    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    cron: str | None = None
    every: str | None = None
    timezone: str | None = None
    prompt: Annotated[str, Field(min_length=1)]
    deliver_to: str
    # The platform chat to send to when the session key does not name it (a Discord DM's channel).
    chat: PlatformId | None = None
    model: str | None = None
    enabled: bool = True
    history_runs: NonNegInt | None = None

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                crontab_trigger(value, "UTC")
            except ValueError as exc:
                raise ValueError(f"a five-field cron expression ({exc})") from exc
        return value

    @field_validator("every")
    @classmethod
    def _valid_every(cls, value: str | None) -> str | None:
        if value is not None and parse_duration(value) < 60:
            raise ValueError("an interval of at least 1m")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str | None) -> str | None:
        return None if value is None else AgentConfig._known_timezone(value)

    @field_validator("deliver_to")
    @classmethod
    def _valid_target(cls, value: str) -> str:
        try:
            delivery_key(value, "main")
        except SessionKeyError as exc:
            raise ValueError(
                "a session key such as 'agent:main:telegram:direct:42', or '<channel>:<chat id>' "
                f"such as 'telegram:-1001234567890' ({exc})"
            ) from exc
        return value

    @model_validator(mode="after")
    def _one_schedule(self) -> ScheduleConfig:
        if (self.cron is None) == (self.every is None):
            raise ValueError("exactly one of cron or every")
        return self

    def interval_seconds(self) -> int | None:
        return parse_duration(self.every) if self.every is not None else None


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["auto", "json", "console"] = "auto"


class Config(_Section):
    agent: AgentConfig = AgentConfig()
    database: DatabaseConfig = DatabaseConfig()
    anthropic: AnthropicConfig = AnthropicConfig()
    conversation: ConversationConfig = ConversationConfig()
    compaction: CompactionConfig = CompactionConfig()
    channels: ChannelsConfig = ChannelsConfig()
    router: RouterConfig = RouterConfig()
    logging: LoggingConfig = LoggingConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    schedules: list[ScheduleConfig] = Field(default_factory=list)
    # Where the file was read from; relative paths inside it are resolved against its folder.
    source: str = Field(default="<defaults>", exclude=True)

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

    def channel(self, provider: str) -> ConsoleConfig | TelegramConfig | DiscordConfig | None:
        section = getattr(self.channels, provider, None)
        if isinstance(section, ConsoleConfig | TelegramConfig | DiscordConfig):
            return section
        return None

    def chat_channel(self, provider: str) -> TelegramConfig | DiscordConfig | None:
        """The section of a platform channel (access lists, admins, reply age), if it has one."""
        section = self.channel(provider)
        return section if isinstance(section, TelegramConfig | DiscordConfig) else None

    def secret_env_names(self) -> list[str]:
        """Names of the environment variables holding secrets, for redaction and `init`."""
        return [
            self.anthropic.api_key_env,
            self.channels.telegram.token_env,
            self.channels.discord.token_env,
        ]


def check_startable(config: Config) -> None:
    """What starting needs beyond valid values, read from this process's environment: a token for
    each enabled Telegram/Discord channel, and an enabled channel for each enabled job to deliver to.
    A ConfigError naming the key otherwise (`run` and `check-config` both ask)."""
    for name in ("telegram", "discord"):
        section: TelegramConfig | DiscordConfig = getattr(config.channels, name)
        if section.enabled and not os.environ.get(section.token_env, "").strip():
            raise ConfigError(
                config.source, f"channels.{name}.token_env",
                f"the environment variable {section.token_env} it names is not set; export the bot "
                f"token there or set channels.{name}.enabled = false",
            )
    for index, job in enumerate(config.schedules):
        provider = delivery_key(job.deliver_to, config.agent.id).provider
        if job.enabled and not getattr(config.channels, provider).enabled:
            raise ConfigError(
                config.source, f'schedules[{index}] (id "{job.id}").deliver_to',
                f"a channel that is enabled; [channels.{provider}] is not (enable it, or set "
                "enabled = false on this job)",
            )


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
        elif not isinstance(section, ConsoleConfig):
            overrides = [s.history_limit for s in section.settings_for(key) if s.history_limit is not None]
            value = overrides[0] if overrides else section.history_limit
    if value is None:
        value = config.conversation.history_limit
    return value or None


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file, raising ConfigError with the file and key on any problem."""
    shown = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(shown, None, "file not found") from None
    except OSError as exc:
        raise ConfigError(shown, None, f"cannot be read ({exc.strerror})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(shown, None, f"is not valid TOML: {exc}") from None
    config = parse_config(data, shown)
    # Pin the file's folder now: relative paths in it must not depend on a later working directory.
    return config.model_copy(update={"source": str(Path(path).absolute())})


def parse_config(data: dict[str, Any], source: str) -> Config:
    """Validate already-parsed TOML data; errors name `source` and the key path."""
    if "source" in data:
        raise ConfigError(source, "source", f"unknown key; expected one of: {_field_list(Config)}")
    for loc, number in _numbers(data):
        if isinstance(number, float) and not math.isfinite(number):
            raise ConfigError(source, _key_path(loc, data), f"expected a finite number (got {number})")
        if isinstance(number, int) and abs(number) > _MAX_INT:
            raise ConfigError(source, _key_path(loc, data), f"expected a 64-bit integer (got {number})")
    try:
        config = Config.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise _to_config_error(exc, source, data) from None
    seen: set[str] = set()
    for index, job in enumerate(config.schedules):
        if job.id in seen:
            key = _key_path(("schedules", str(index), "id"), data)
            raise ConfigError(source, key, f"a unique id; another [[schedules]] entry is {job.id!r}")
        seen.add(job.id)
        target = _key_path(("schedules", str(index), "deliver_to"), data)
        key_of = delivery_key(job.deliver_to, config.agent.id)
        if key_of.agent_id != config.agent.id:
            raise ConfigError(source, target, f"a session key of this agent ('agent:{config.agent.id}:...')")
        if key_of.provider == "discord" and key_of.is_direct and job.chat is None:
            raise ConfigError(
                source, _key_path(("schedules", str(index), "chat"), data),
                "the DM channel id: a Discord DM is sent to its channel, which the key does not name",
            )
    return config


def _numbers(node: Any, loc: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], int | float]]:
    """Every number in parsed TOML with its key path, so out-of-range ones are refused anywhere."""
    if isinstance(node, dict):
        return [found for key, value in node.items() for found in _numbers(value, (*loc, str(key)))]
    if isinstance(node, list):
        return [found for index, value in enumerate(node) for found in _numbers(value, (*loc, str(index)))]
    if isinstance(node, int | float) and not isinstance(node, bool):
        return [(loc, node)]
    return []


def _to_config_error(exc: ValidationError, source: str, data: dict[str, Any] | None = None) -> ConfigError:
    error = exc.errors()[0]
    loc = tuple(str(part) for part in error["loc"])
    if loc[-1:] == ("[key]",):  # a table key that is not valid: name the key itself
        loc = loc[:-1]
    key = _key_path(loc, data)
    if error["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        expected = "unknown key"
        if parent is not None:
            expected += f"; expected one of: {_field_list(parent)}"
        return ConfigError(source, key, expected)
    message = str(error["msg"]).removeprefix("Value error, ")
    given = error.get("input")
    if error["type"] == "missing":
        return ConfigError(source, key, "required key is missing")
    shown = f" (got {given!r})" if not isinstance(given, dict) else ""
    return ConfigError(source, key, f"expected {_lower_first(message)}{shown}")


def _key_path(loc: tuple[str, ...], data: Any = None) -> str:
    """A dotted key; a list entry shows as `schedules[2] (id "daily")` so the entry can be found."""
    parts: list[str] = []
    node = data
    for part in loc:
        if isinstance(node, list) and part.isdigit():
            node = node[int(part)] if int(part) < len(node) else None
            entry = f"[{part}]"
            if isinstance(node, dict) and isinstance(node.get("id"), str):
                entry += f' (id "{node["id"]}")'
            parts[-1] += entry
            continue
        node = node.get(part) if isinstance(node, dict) else None
        parts.append(part if part.replace("_", "").isalnum() and not part.isdigit() else f'"{part}"')
    return ".".join(parts)


def _model_at(loc: tuple[str, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = Config
    index = 0
    while index < len(loc):
        field = model.model_fields.get(loc[index])
        if field is None:
            return None
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            index += 1
        elif getattr(annotation, "__origin__", None) is list:
            model = annotation.__args__[0]  # type: ignore[union-attr]
            index += 2  # skip the list index
        elif getattr(annotation, "__origin__", None) is dict:
            value_type = annotation.__args__[1]  # type: ignore[union-attr]
            model = value_type
            index += 2  # skip the dict key
        else:
            return None
    return model


def _field_list(model: type[BaseModel]) -> str:
    return ", ".join(name for name, field in model.model_fields.items() if not field.exclude)


def _lower_first(text: str) -> str:
    text = text.removeprefix("Input should be ")
    if text.startswith(("greater", "less")):
        text = "a value " + text
    if text.startswith("a valid dictionary"):
        text = "a table"
    if text.startswith("String should match pattern"):
        text = "a string matching" + text.removeprefix("String should match")
    return text[:1].lower() + text[1:]
