"""Updates that can never be committed, end to end: the daemon with the real python-telegram-bot
against the Bot API stand-in, on SQLite and PostgreSQL. One update the store cannot take, or a
webhook body nothing can read, is quarantined; the updates after it keep flowing."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from bot.config import Config
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.telegram_api import TelegramStandIn, private_chat, user
from tests.harness import router_of
from tests.test_telegram import settled, telegram_config, telegram_daemon, texts_to  # noqa: F401
from tests.test_telegram_webhook import SECRET, secrets, webhook_config, webhook_daemon  # noqa: F401

ADA = user(42, "Ada", "ada")
DM = "agent:main:telegram:direct:42"
# Valid JSON to Telegram's eyes, but a text no database can encode: a lone UTF-16 surrogate.
LONE_SURROGATE = "a\ud800b"
NOT_STORED = "telegram update not stored; fetching it again"


def handed_out(tg: TelegramStandIn, update: dict[str, Any]) -> int:
    """How many getUpdates answers carried this update."""
    return sum(1 for c in tg.calls_of("getUpdates")
               if any(u.get("update_id") == update["update_id"] for u in c.result or ()))


class Refusal:
    """Makes the daemon's database refuse to store what users write (a trigger, as a full disk or a
    failing drive would refuse), on whichever backend the test runs."""

    def __init__(self, backend: str, db: Path, pg_url: str | None) -> None:
        self.backend, self.db, self.pg_url = backend, db, pg_url

    def _execute(self, *statements: str) -> None:
        if self.backend == "sqlite":
            with sqlite3.connect(self.db) as conn:
                for statement in statements:
                    conn.execute(statement)
            return
        import psycopg

        assert self.pg_url is not None
        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def refuse(self) -> None:
        if self.backend == "sqlite":
            self._execute("CREATE TRIGGER refuse_inbound BEFORE INSERT ON messages WHEN NEW.role = 'user' "
                          "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
            return
        self._execute(
            "CREATE FUNCTION refuse_inbound() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'database or disk is full'; END $$",
            "CREATE TRIGGER refuse_inbound BEFORE INSERT ON messages FOR EACH ROW "
            "WHEN (NEW.role = 'user') EXECUTE FUNCTION refuse_inbound()",
        )

    def allow(self) -> None:
        self._execute("DROP TRIGGER refuse_inbound" if self.backend == "sqlite"
                      else "DROP TRIGGER refuse_inbound ON messages")


@pytest.fixture
def refusal(store_backend: str, db: Path, view: Store, request: pytest.FixtureRequest) -> Refusal:
    """A `Refusal` on the test daemon's database (which `view` has created)."""
    pg_url = request.getfixturevalue("pg_url") if store_backend == "postgres" else None
    return Refusal(store_backend, db, pg_url)


async def test_an_update_the_store_cannot_encode_is_quarantined_and_input_flows_on(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config],  # noqa: F811
    view: Store, store_backend: str,
) -> None:
    """A text with a lone surrogate fails to store twice the same way, so it is quarantined raw with
    its error and counted by `status`; the offset moves past it and the next message is stored
    and answered."""
    config = telegram_config()
    with capture_logs() as logs:
        async with telegram_daemon(config) as daemon:
            bad = tg.push_message(private_chat(ADA), ADA, LONE_SURROGATE)
            later = tg.push_message(private_chat(ADA), ADA, "still there?")
            await tg.wait_for(lambda: tg.sent)
            await settled(tg, daemon, later)
            status = await daemon.status()

    assert texts_to(tg, 42) == ["re: still there?"]
    ((provider, ref, raw, error),) = await view.quarantined()
    assert (provider, ref, json.loads(raw)) == ("telegram", str(bad["update_id"]), bad)
    assert raw.isascii() and "surrogates not allowed" in error
    assert status["quarantined"] == 1
    assert tg.confirmed_offset > later["update_id"] > bad["update_id"]
    assert handed_out(tg, bad) == 2
    assert [(m.role, m.text) for m in await view.history(DM, 10)] == [
        ("user", "still there?"), ("assistant", "re: still there?")]
    retried = [e for e in logs if e["event"] == NOT_STORED]
    assert [e["update_id"] for e in retried] == [bad["update_id"]]


async def test_a_store_failure_that_happens_once_is_retried_and_stored_not_quarantined(
    tg: TelegramStandIn, api: AnthropicStandIn, telegram_config: Callable[..., Config],  # noqa: F811
    view: Store, refusal: Refusal,
) -> None:
    """A message the database refuses once, then takes, is fetched again, stored once and answered;
    nothing is quarantined."""
    config = telegram_config()
    refusal.refuse()
    with capture_logs() as logs:
        async with telegram_daemon(config) as daemon:
            pushed = tg.push_message(private_chat(ADA), ADA, "are you there?")
            await tg.wait_for(lambda: [e for e in logs if e["event"] == NOT_STORED])
            # Before the retry, half a second later; on a thread: a blocking write on the event
            # loop the daemon shares can wait out its busy timeout behind a daemon write that
            # needs that loop to commit.
            await asyncio.to_thread(refusal.allow)
            await tg.wait_for(lambda: tg.sent)
            await settled(tg, daemon, pushed)

    assert texts_to(tg, 42) == ["re: are you there?"]
    assert await view.quarantined() == []
    assert [(m.role, m.text) for m in await view.history(DM, 10)] == [
        ("user", "are you there?"), ("assistant", "re: are you there?")]
    assert handed_out(tg, pushed) == 2


async def post_body(url: str, body: bytes) -> int:
    """POST raw bytes to the webhook with the right secret, as only a broken or hostile sender would."""
    async with aiohttp.ClientSession() as session, session.post(
        url, data=io.BytesIO(body), headers={"X-Telegram-Bot-Api-Secret-Token": SECRET,
                                 "Content-Type": "application/json"}) as response:
        return response.status


@pytest.mark.parametrize(
    ("body", "kept", "error"),
    [
        pytest.param(b"[" * 50_000 + b"]" * 50_000, "[" * 50_000 + "]" * 50_000, "RecursionError: ",
                     id="nested 50 000 deep"),
        pytest.param(b'{"update_id": 5, "message": \xff}', '{"update_id": 5, "message": \ufffd}',
                     "UnicodeDecodeError: ", id="not UTF-8"),
        pytest.param(b"[" + b" " * 2_000_000 + b"]", "<a body over the size limit>",
                     "HTTPRequestEntityTooLarge: ", id="over the size limit"),
    ],
)
async def test_a_webhook_body_nothing_can_read_is_answered_200_and_quarantined(
    tg: TelegramStandIn, api: AnthropicStandIn, webhook_config: Callable[..., Config],  # noqa: F811
    view: Store, store_backend: str, body: bytes, kept: str, error: str,
) -> None:
    """A body with the right secret token that cannot be read as JSON (50 000 nested brackets, bytes
    that are no UTF-8, more than the server reads) is quarantined and answered 200, so Telegram
    would not post it again; the updates after it are stored and answered."""
    config = webhook_config()
    async with webhook_daemon(config) as (daemon, _):
        assert tg.webhook is not None
        status = await post_body(tg.webhook.url, body)
        later = tg.push_message(private_chat(ADA), ADA, "after the junk")
        assert await tg.delivered(later) == 200
        await tg.wait_for(lambda: tg.sent)
        await router_of(daemon).idle()

    assert status == 200
    ((provider, ref, raw, reason),) = await view.quarantined()
    assert (provider, ref, json.loads(raw)) == ("telegram", None, kept)
    assert reason.startswith(error)
    assert texts_to(tg, 42) == ["re: after the junk"]


async def test_a_webhook_update_the_store_cannot_encode_is_quarantined_on_its_redelivery(
    tg: TelegramStandIn, api: AnthropicStandIn, webhook_config: Callable[..., Config],  # noqa: F811
    view: Store, store_backend: str,
) -> None:
    """Posted by webhook, a text with a lone surrogate is answered 500 once (Telegram posts it
    again), then quarantined and answered 200; the next message is stored and answered."""
    config = webhook_config()
    async with webhook_daemon(config) as (daemon, _):
        bad = tg.push_message(private_chat(ADA), ADA, LONE_SURROGATE)
        assert await tg.delivered(bad) == 200
        later = tg.push_message(private_chat(ADA), ADA, "still there?")
        assert await tg.delivered(later) == 200
        await tg.wait_for(lambda: tg.sent)
        await router_of(daemon).idle()

    assert [a.status for a in tg.webhook_attempts if a.update_id == bad["update_id"]] == [500, 200]
    ((_, ref, raw, error),) = await view.quarantined()
    assert (ref, json.loads(raw)) == (str(bad["update_id"]), bad)
    assert "surrogates not allowed" in error
    assert texts_to(tg, 42) == ["re: still there?"]
