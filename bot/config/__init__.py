"""Configuration: config.toml read once and validated into typed, frozen models.

Every name is importable from here. Behind it, a module per concern: `fields` (the shared field
types and the base section), `sections` (agent, Anthropic, conversation and the other daemon-wide
sections), `channel_sections` (console, Telegram, Discord), `schedule_sections` (`[scheduler]` and
`[[schedules]]`), `mcp_sections` (`[[mcp_servers]]`), `root` (`Config`, `check_startable`,
`resolve_history_limit`), `env_file` (`[secrets]`: secrets read from a 0600 file of NAME=value
lines) and `loading` (`load_config`, `parse_config` and the errors that name the key).
"""

from __future__ import annotations

from bot.config.channel_sections import (
    ChannelsConfig,
    ChatChannelConfig,
    ChatSettings,
    ConsoleConfig,
    DiscordConfig,
    DiscordGuildConfig,
    DmConfig,
    MatrixConfig,
    PlatformConfig,
    SlackConfig,
    TelegramConfig,
    WebChatConfig,
)
from bot.config.env_file import SecretsConfig
from bot.config.fields import (
    MAX_REPLY_TOKENS,
    DmPolicy,
    EnvName,
    HttpUrl,
    IdKey,
    NonNegInt,
    PlatformId,
    Policy,
    PosFloat,
    PosInt,
)
from bot.config.loading import load_config, parse_config
from bot.config.mcp_sections import McpServerConfig
from bot.config.root import Config, check_startable, resolve_history_limit
from bot.config.schedule_sections import RemindersConfig, ScheduleConfig, SchedulerConfig
from bot.config.schedule_spec import SCHEDULE_CHANNELS, parse_duration
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
from bot.config.tool_sections import ToolRule, ToolsConfig

__all__ = [
    "MAX_REPLY_TOKENS",
    "SCHEDULE_CHANNELS",
    "AgentConfig",
    "AnthropicConfig",
    "ChannelsConfig",
    "ChatChannelConfig",
    "ChatSettings",
    "CompactionConfig",
    "Config",
    "ConsoleConfig",
    "ConversationConfig",
    "DatabaseConfig",
    "DiscordConfig",
    "DiscordGuildConfig",
    "DmConfig",
    "DmPolicy",
    "EnvName",
    "HttpUrl",
    "IdKey",
    "LoggingConfig",
    "MatrixConfig",
    "McpServerConfig",
    "MediaConfig",
    "ModelPrice",
    "NonNegInt",
    "PlatformConfig",
    "PlatformId",
    "Policy",
    "PosFloat",
    "PosInt",
    "RemindersConfig",
    "RouterConfig",
    "ScheduleConfig",
    "SchedulerConfig",
    "SecretsConfig",
    "SemanticConfig",
    "SlackConfig",
    "TelegramConfig",
    "ToolRule",
    "ToolsConfig",
    "WebChatConfig",
    "check_startable",
    "load_config",
    "parse_config",
    "parse_duration",
    "resolve_history_limit",
]
