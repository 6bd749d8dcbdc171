"""Several agents: `[[agents]]` entries beside `[agent]`, `[[bindings]]` routing chats to them, and
`[agent_messages]`, the bounds on agents writing to each other.

`[agent]` stays the default agent, so a config written for one agent runs unchanged. An
`[[agents]]` entry names what its agent does differently; the sub-tables it sets (`conversation`,
`roles`, `tools`) override only the keys written in them, the rest comes from the top-level section.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from bot.config.fields import (
    MatrixRoomId,
    MatrixUserId,
    PlatformId,
    PosInt,
    Section,
    SlackId,
    known_timezone,
)
from bot.config.provider_sections import RolesConfig
from bot.config.sections import ConversationConfig
from bot.config.tool_sections import ToolsConfig

AgentId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
# A channel: "console", a platform ("telegram", "discord": its default bot) or one of a platform's
# extra bots, "<platform>.<account>" (`[channels.telegram.accounts.<account>]`).
ChannelName = Annotated[
    str, Field(pattern=r"^(console|telegram|discord|slack|matrix)(\.[a-z0-9][a-z0-9_-]*)?$")]


class AgentEntry(Section):
    """One more agent: its identity and prompt files, and overrides of the daemon-wide sections."""

    id: AgentId
    name: str | None = None  # unset: the id
    # Unset files mean none (another agent's soul is not inherited); the numbers and the timezone
    # default to [agent]'s.
    soul_file: str | None = None
    memory_file: str | None = None
    file_excerpt_chars: PosInt | None = None
    files_total_chars: PosInt | None = None
    timezone: str | None = None
    conversation: ConversationConfig = ConversationConfig()
    roles: RolesConfig = RolesConfig()
    tools: ToolsConfig = ToolsConfig()

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str | None) -> str | None:
        return None if value is None else known_timezone(value)


class BindingConfig(Section):
    """Messages matching every key given here go to `agent` (see `bot.routing` for the order)."""

    agent: AgentId
    channel: ChannelName | None = None
    guild: PlatformId | None = None  # a Discord guild (server)
    # A group, a channel (its threads too) or a private chat; Slack's ids are letters and digits,
    # Matrix's "!room:server" and "@user:server".
    chat: PlatformId | SlackId | MatrixRoomId | MatrixUserId | None = None
    # Whoever writes, wherever they are (within the rest).
    user: PlatformId | SlackId | MatrixUserId | None = None

    @model_validator(mode="after")
    def _matches_something(self) -> BindingConfig:
        if self.channel is None and self.guild is None and self.chat is None and self.user is None:
            raise ValueError("at least one of channel, guild, chat or user to match (else it would "
                             "match everything: set that agent's channel accounts instead)")
        return self


class AgentMessagesConfig(Section):
    """Agents writing to agents (`message_agent`, a job delivered to an agent): loops are bounded."""

    # Messages one exchange may pass between agents, the first included; a reply that would be
    # one more is kept in its session but not passed on.
    hop_limit: Annotated[int, Field(ge=1, le=20)] = 3
    # Messages one agent may send another in any hour; more are refused (the tool says so).
    per_pair_per_hour: PosInt = 30
