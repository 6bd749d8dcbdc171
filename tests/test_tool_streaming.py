"""A reply that used tools, streamed on Telegram: the draft shows the final answer growing, not
what a tool round said before its call."""

from __future__ import annotations

from collections.abc import Callable

from bot.config import Config
from bot.testing.anthropic_api import AnthropicStandIn, ToolUse
from bot.testing.telegram_api import TelegramStandIn, private_chat
from tests.test_telegram import telegram_daemon
from tests.test_telegram_streaming import ADA, ANSWER, answered, slowly, telegram_config  # noqa: F401


async def test_the_draft_grows_with_the_final_answer_after_a_tool_round(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config]  # noqa: F811
) -> None:
    """The model first calls a tool, then writes slowly: every draft is the start of the final
    answer, and the answer lands once as a message."""
    config = telegram_config()
    api.script(ToolUse((("current_time", {}),)), slowly(ANSWER, 4.0))
    async with telegram_daemon(config) as daemon:
        await answered(tg, daemon, private_chat(ADA), "what time is it, and why are there tides?")

    drafts = [d.visible_text for d in tg.drafts if d.chat_id == 42]
    assert len(drafts) >= 2
    assert all(ANSWER.startswith(text) for text in drafts)
    assert [(m.chat_id, m.visible_text) for m in tg.sent] == [(42, ANSWER)]
    _, final = (r for r in api.requests if r.body.get("tools"))
    assert final.messages[-1]["content"][0]["type"] == "tool_result"
