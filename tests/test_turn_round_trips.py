"""What one answered turn costs the daemon's store in statements, on each backend: on PostgreSQL a
statement is a round trip to the server (BEGIN and COMMIT too), so the turn's writes are one each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.config import Config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.fake_channel import FakeChannel
from tests.harness import config_data, daemon_with, say
from tests.sql import traced

MakeConfig = Callable[[dict[str, Any]], Config]

# The statements a turn may take on PostgreSQL: the message stored (1), the opening, the context's
# reads and the recall search (3), the commit (1), the outbox row's end (1) and the compaction
# check (1), and the leases several daemons share the store by (7: taken, dropped, and the reads of
# waiting work). Before the message and the commit were one statement each they took 4 and 7
# round trips (23 in all).
PG_TURN = 14


async def test_a_turn_writes_its_message_and_its_commit_in_one_statement_each(
    api: AnthropicStandIn, channel: FakeChannel, view: Store, make_config: MakeConfig, store_backend: str,
) -> None:
    """A second message of a chat, answered: the user's message is one write, the reply with its
    outbox row, usage and snapshot one more; on PostgreSQL each is a single statement (no BEGIN or
    COMMIT), and the whole turn stays within PG_TURN."""
    config = make_config(config_data(api))
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "hello there")
        async with traced(daemon._store) as statements:  # type: ignore[arg-type]
            await say(daemon, channel, "and the weather tomorrow")
    assert [m.text for m in channel.sent] == ["re: hello there", "re: and the weather tomorrow"]
    history = await view.history(str(channel.key()), 10)
    assert [m.text for m in history][2:] == ["and the weather tomorrow", "re: and the weather tomorrow"]
    assert len(await view.snapshots(str(channel.key()))) == 2
    writes = [s for s in statements if "INSERT INTO messages" in s]
    assert len(writes) == 2, statements
    if store_backend == "postgres":
        assert not [s for s in statements if s in ("BEGIN", "COMMIT")], statements
        (commit,) = writes[1:]
        assert all(table in commit for table in ("outbox", "model_usage", "context_snapshots"))
        assert len(statements) <= PG_TURN, "\n".join(s[:100] for s in statements)
