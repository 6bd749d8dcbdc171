"""Slack for the crash loop and the throughput bench: the Web API + Socket Mode stand-in in the
bench's process, the daemon `python -m bot run` pointed at it by `base_url` alone.

Users write DMs (`U<n>` in `D<n>`). A message written while no app is connected goes to history
only, as on Slack (Socket Mode delivers nothing written while no connection was open): the next
start reads it back with conversations.history. A DM the daemon never stored a message of is never
read back, so each user's first DM goes through a running daemon first (the warm-up), as on Discord.
What the bot sent is read as people see it now (a preview edited into the reply counts once).
"""

from __future__ import annotations

import sys
from pathlib import Path

from bot.testing.slack_api import SlackStandIn, shown

BOT_TOKEN = "xoxb-crash-loop-token"
APP_TOKEN = "xapp-crash-loop-token"


def slack_user(user: int) -> str:
    return f"U{user:08d}"


class SlackPlatform:
    name, warm_up = "slack", True

    def __init__(self, slack: SlackStandIn) -> None:
        self.slack = slack

    def config_section(self, users: int) -> str:
        ids = ", ".join(f'"{slack_user(u)}"' for u in range(users))
        return (f'[channels.slack]\nenabled = true\nbase_url = "{self.slack.base_url}"\n'
                f"allow_from = [{ids}]\nmax_reply_age = 3600\n")

    def env(self) -> dict[str, str]:
        return {"SLACK_BOT_TOKEN": self.slack.bot_token, "SLACK_APP_TOKEN": self.slack.app_token}

    def command(self, config: Path) -> list[str]:
        return [sys.executable, "-m", "bot", "run", "--config", str(config)]

    def contacts(self) -> int:
        return self.slack.connections

    def push(self, user: int, text: str) -> bool:
        who = slack_user(user)
        if who not in self.slack.users:
            self.slack.add_user(who, f"user{user}")
        self.slack.message(self.slack.dm_of(who), who, text, live=self.slack.live)
        return True

    def sent_texts(self) -> list[str]:
        bot = self.slack.bot_user_id
        return [shown(m) for messages in self.slack.history.values() for m in messages
                if m.get("user") == bot]

    def posted(self) -> list[tuple[float, str]]:
        """When each of the bot's messages was first posted, and what it says now."""
        now = {(m.get("ts"), channel): shown(m) for channel, messages in self.slack.history.items()
               for m in messages}
        return [(m.time, now.get((m.ts, m.channel), m.text)) for m in self.slack.sent]
