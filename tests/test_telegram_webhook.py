"""Telegram webhook mode end to end: the daemon serves its webhook, the Bot API stand-in posts
updates to it as Telegram does (secret header, redelivery until a 2xx), and an update is answered
200 only once it is stored."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.cli.base import setup_logging as _logging
from bot.config import Config, check_startable, load_config
from bot.core.errors import ConfigError
from bot.daemon.assembly import Daemon, build_channels
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn
from bot.testing.telegram_api import TelegramStandIn, WebhookAttempt, private_chat, user
from channels.telegram.channel import TelegramChannel
from channels.telegram.webhook import WebhookServer
from tests.harness import API_KEY, config_data, router_of, running, wait_until
from tests.test_operations import toml
from tests.test_telegram import texts_to

ADA = user(42, "Ada", "ada")
BEA = user(7, "Bea")
SECRET = "s3cret-webhook_token-0123456789"
SECRET_ENV = "TELEGRAM_WEBHOOK_SECRET"
SESSION = "agent:main:telegram:direct:42"
MakeConfig = Callable[[dict[str, Any]], Config]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def secrets(tg: TelegramStandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)
    monkeypatch.setenv(SECRET_ENV, SECRET)


def telegram_section(tg: TelegramStandIn, port: int, **telegram: Any) -> dict[str, Any]:
    """[channels.telegram] in webhook mode on 127.0.0.1:`port`, Ada and Bea allowed."""
    return {"enabled": True, "base_url": tg.base_url, "allow_from": [42, 7], "mode": "webhook",
            "webhook_listen": f"127.0.0.1:{port}", "webhook_url": f"http://127.0.0.1:{port}/telegram",
            "webhook_secret_env": SECRET_ENV, **telegram}


@pytest.fixture
def webhook_config(
    api: AnthropicStandIn, tg: TelegramStandIn, make_config: MakeConfig, secrets: None
) -> Callable[..., Config]:
    port = free_port()

    def make(*, top: dict[str, Any] | None = None, **telegram: Any) -> Config:
        data = config_data(api, channels={"telegram": telegram_section(tg, port, **telegram)}, **(top or {}))
        return make_config(data)

    return make


@asynccontextmanager
async def webhook_daemon(config: Config) -> AsyncIterator[tuple[Daemon, TelegramChannel]]:
    """The daemon as `switchboard run` assembles it, once Telegram has its webhook."""
    (channel,) = build_channels(config, console=False)
    assert isinstance(channel, TelegramChannel)
    async with running(config, [channel], AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        await asyncio.wait_for(channel.ready.wait(), 5)
        yield daemon, channel


def stored_texts(db: Path) -> list[str]:
    """The user messages in the database right now (read synchronously: nothing else runs meanwhile)."""
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT text FROM messages WHERE role = 'user' ORDER BY id")]


def refuse_user_messages(db: Path) -> None:
    """Make the database refuse to store what users write, as a full disk would."""
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TRIGGER refuse_inbound BEFORE INSERT ON messages WHEN NEW.role = 'user' "
                     "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")


def allow_user_messages(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER refuse_inbound")


async def test_a_message_posted_to_the_webhook_is_stored_before_the_200_and_answered(
    tg: TelegramStandIn, api: AnthropicStandIn, webhook_config: Callable[..., Config], db: Path
) -> None:
    """The daemon registers its webhook (URL, secret, the updates polling asks for, nothing pending
    dropped) and polls nothing; a message Telegram posts is in the database when the 200 arrives,
    and is answered."""
    config = webhook_config()
    stored_at_answer: list[tuple[WebhookAttempt, list[str]]] = []
    tg.webhook_sender.on_answer = lambda attempt: stored_at_answer.append((attempt, stored_texts(db)))
    async with webhook_daemon(config) as (daemon, _):
        (registered,) = tg.calls_of("setWebhook")
        pushed = tg.push_message(private_chat(ADA), ADA, "hello by webhook")
        assert await tg.delivered(pushed) == 200
        await tg.wait_for(lambda: tg.sent)
        await router_of(daemon).idle()

    assert registered.params == {"url": config.channels.telegram.webhook_url, "secret_token": SECRET,
                                 "allowed_updates": ["message"], "drop_pending_updates": False}
    ((attempt, stored),) = stored_at_answer
    assert (attempt.status, attempt.secret_sent, stored) == (200, SECRET, ["hello by webhook"])
    assert texts_to(tg, 42) == ["re: hello by webhook"]
    assert tg.calls_of("getUpdates") == [] and tg.calls_of("deleteWebhook") == []
    assert tg.webhook is not None  # a stop leaves the webhook to the other instances


async def test_a_request_without_the_right_secret_is_refused_and_nothing_is_stored(
    tg: TelegramStandIn, api: AnthropicStandIn, webhook_config: Callable[..., Config], db: Path
) -> None:
    """A forged update (no secret header, or a wrong one) is refused with 401/403 and neither stored
    nor answered; Telegram's own delivery still works."""
    config = webhook_config()
    forged = {"update_id": 999, "message": {"message_id": 1, "date": 1, "chat": private_chat(ADA),
                                            "from": ADA, "text": "forged"}}
    async with webhook_daemon(config) as (daemon, _):
        missing = await tg.post_to_webhook(forged, secret=None)
        wrong = await tg.post_to_webhook(forged, secret="not-the-secret")
        assert stored_texts(db) == []
        genuine = tg.push_message(private_chat(ADA), ADA, "the real one")
        assert await tg.delivered(genuine) == 200
        await tg.wait_for(lambda: tg.sent)
        await router_of(daemon).idle()

    assert (missing, wrong) == (401, 403)
    assert stored_texts(db) == ["the real one"]
    assert texts_to(tg, 42) == ["re: the real one"]


async def test_an_update_the_store_refuses_gets_a_500_and_telegrams_redelivery_is_answered_once(
    tg: TelegramStandIn, api: AnthropicStandIn, webhook_config: Callable[..., Config], db: Path,
    view: Store, capsys: pytest.CaptureFixture[str],
) -> None:
    """While the database refuses the message the webhook answers 500, so Telegram posts it again;
    once the database takes it, the redelivery gets a 200 and one reply. The same update posted
    once more (a 200 Telegram never saw) is a duplicate: still one message, one reply."""
    config = webhook_config()
    refuse_user_messages(db)

    async def allow_after_the_first_refusal(attempt: WebhookAttempt) -> None:
        # Before the redelivery: refused twice the same way, the update would be quarantined.
        # From a thread, as another process writes: not on the loop the daemon's writes need.
        if attempt.status == 500:
            tg.webhook_sender.on_answer = None
            await asyncio.to_thread(allow_user_messages, db)

    tg.webhook_sender.on_answer = allow_after_the_first_refusal
    async with webhook_daemon(config) as (daemon, _):
        pushed = tg.push_message(private_chat(ADA), ADA, "are you there?")
        assert await tg.delivered(pushed) == 200
        await tg.wait_for(lambda: tg.sent)
        await router_of(daemon).idle()
        assert tg.webhook is not None
        assert await tg.webhook_sender.post(tg.webhook, pushed) == 200
        await router_of(daemon).idle()

    assert [a.status for a in tg.webhook_attempts] == [500, 200, 200]
    assert await view.quarantined() == []
    assert texts_to(tg, 42) == ["re: are you there?"]
    history = await view.history(SESSION, 10)
    assert [(m.role, m.text) for m in history] == [("user", "are you there?"),
                                                  ("assistant", "re: are you there?")]
    assert "telegram update not stored; Telegram sends it again" in capsys.readouterr().out


async def test_a_stop_refuses_new_requests_with_503_and_stores_the_one_in_hand(
    tg: TelegramStandIn, api: AnthropicStandIn, webhook_config: Callable[..., Config], db: Path,
    view: Store,
) -> None:
    """An update whose write is under way when the daemon stops is still stored and gets its 200;
    one arriving while it stops gets 503 and stays with Telegram, which delivers it to the next
    run: both are answered then, nothing lost and nothing twice."""
    config = webhook_config()
    # Used from a thread (BEGIN waits for the lock there, not on the event loop the daemon shares).
    locker = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    try:
        async with webhook_daemon(config) as (daemon, channel):
            server = channel._updates
            assert isinstance(server, WebhookServer)
            await asyncio.to_thread(locker.execute, "BEGIN IMMEDIATE")  # the daemon's write waits for it
            in_hand = tg.push_message(private_chat(ADA), ADA, "written as we stop")
            await wait_until(lambda: server.in_hand == 1)
            daemon.request_stop()
            await wait_until(lambda: server.stopping)
            # From another chat: Telegram posts a chat's next update only after the last was answered.
            late = tg.push_message(private_chat(BEA), BEA, "arrived while stopping")
            await tg.wait_for(lambda: any(a.update_id == late["update_id"] for a in tg.webhook_attempts))
            locker.execute("ROLLBACK")
            assert await tg.delivered(in_hand) == 200
            assert await tg.delivered(late) != 200  # 503, then no server: Telegram keeps it
    finally:
        locker.close()
    late_answers = [a.status for a in tg.webhook_attempts if a.update_id == late["update_id"]]
    assert late_answers[0] == 503 and 200 not in late_answers
    assert stored_texts(db) == ["written as we stop"]

    async with webhook_daemon(config) as (daemon, _):
        assert await tg.delivered(late) == 200
        await tg.wait_for(lambda: len(tg.sent) == 2)
        await router_of(daemon).idle()

    assert (texts_to(tg, 42), texts_to(tg, 7)) == (["re: written as we stop"], ["re: arrived while stopping"])
    assert stored_texts(db) == ["written as we stop", "arrived while stopping"]


async def test_switching_from_webhook_to_polling_deletes_the_webhook_and_polls(
    tg: TelegramStandIn, api: AnthropicStandIn, secrets: None, tmp_path: Path
) -> None:
    """A reload from mode = "webhook" to "polling" closes the server, deletes the webhook and polls;
    an update that Telegram could not deliver while no daemon listened is polled after a restart
    in polling mode."""
    path, port = tmp_path / "config.toml", free_port()

    def write(mode: str) -> Config:
        data = config_data(api, channels={"telegram": telegram_section(tg, port, mode=mode)},
                           database={"path": str(tmp_path / "switchboard.db")})
        path.write_text(toml(data), encoding="utf-8")
        return load_config(path)

    async with webhook_daemon(write("webhook")) as (daemon, _):
        first = tg.push_message(private_chat(ADA), ADA, "by webhook")
        assert await tg.delivered(first) == 200
        write("polling")
        outcome = await daemon.reload()
        assert outcome["reloaded"] is True, outcome
        await tg.wait_for(lambda: tg.calls_of("getUpdates"))
        tg.push_message(private_chat(ADA), ADA, "by polling")
        await tg.wait_for(lambda: len(tg.sent) == 2)
        assert tg.webhook is None and len(tg.calls_of("deleteWebhook")) == 1
        status = await daemon.status()
        assert [(c["provider"], c["state"]) for c in status["channels"]] == [("telegram", "connected")]
    # The retired webhook channel was closed with the daemon, though its grace had not run out.
    assert [t for t in asyncio.all_tasks() if t.get_name() == "telegram"] == []

    # Webhook again, then stopped: what Telegram posts meanwhile finds no server and stays pending.
    async with webhook_daemon(write("webhook")):
        pass
    missed = tg.push_message(private_chat(ADA), ADA, "while nobody listened")
    assert await tg.delivered(missed) is None
    async with webhook_daemon(write("polling")) as (daemon, _):
        await tg.wait_for(lambda: len(tg.sent) == 3)
        await router_of(daemon).idle()

    assert texts_to(tg, 42) == ["re: by webhook", "re: by polling", "re: while nobody listened"]
    assert tg.webhook is None


async def test_the_webhook_secret_never_reaches_the_logs(
    tg: TelegramStandIn, api: AnthropicStandIn, webhook_config: Callable[..., Config],
    monkeypatch: pytest.MonkeyPatch, log_stream: io.StringIO,
) -> None:
    """Setting the webhook, a message, a forged request and a stop, with every library at DEBUG
    (python-telegram-bot logs each call's parameters), leave no trace of the secret."""
    config = webhook_config(top={"logging": {"level": "DEBUG", "format": "json"}})
    monkeypatch.setattr("sys.stderr", log_stream)
    _logging(config)
    async with webhook_daemon(config) as (daemon, _):
        pushed = tg.push_message(private_chat(ADA), ADA, "hello")
        assert await tg.delivered(pushed) == 200
        assert await tg.post_to_webhook(pushed, secret=SECRET[:-1]) == 403
        await tg.wait_for(lambda: tg.sent)
        await router_of(daemon).idle()

    logs = log_stream.getvalue()
    lines = [json.loads(line) for line in logs.splitlines()]
    assert any("setWebhook" in line["event"] for line in lines)  # PTB's own DEBUG line for the call
    assert any(line["event"] == "telegram webhook request refused: secret token missing or wrong"
               for line in lines)
    assert tg.calls_of("setWebhook")[0].params["secret_token"] == SECRET
    assert SECRET not in logs and SECRET[:-1] not in logs


async def test_each_bot_serves_its_own_webhook_and_answers_what_was_sent_to_it(
    tg: TelegramStandIn, api: AnthropicStandIn, make_config: MakeConfig, secrets: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two bots in webhook mode, each on its own port and URL: each registers its own webhook and
    answers only the updates Telegram posts for it."""
    work = tg.add_bot(token="654321:WORK", bot_id=2000, bot_username="work_bot")
    monkeypatch.setenv("WORK_BOT_TOKEN", work.token)
    main_port, work_port = free_port(), free_port()
    section = telegram_section(tg, main_port)
    section["accounts"] = {"work": {"token_env": "WORK_BOT_TOKEN", "webhook_listen": f"127.0.0.1:{work_port}",
                                    "webhook_url": f"http://127.0.0.1:{work_port}/telegram/work"}}
    config = make_config(config_data(api, channels={"telegram": section}))
    channels = build_channels(config, console=False)
    async with running(config, channels, AnthropicBrain(config.anthropic, API_KEY)) as daemon:
        for channel in channels:
            assert isinstance(channel, TelegramChannel)
            await asyncio.wait_for(channel.ready.wait(), 5)
        for bot, text in ((tg, "to main"), (work, "to work")):
            assert await bot.delivered(bot.push_message(private_chat(ADA), ADA, text)) == 200
        await tg.wait_for(lambda: tg.sent and work.sent)
        await router_of(daemon).idle()

    assert (texts_to(tg, 42), texts_to(work, 42)) == (["re: to main"], ["re: to work"])
    assert [w.url.rsplit(":", 1)[1] for w in (tg.webhook, work.webhook) if w is not None] == [
        f"{main_port}/telegram", f"{work_port}/telegram/work"]


WEBHOOK = ('[channels.telegram]\nenabled = true\nmode = "webhook"\nwebhook_secret_env = "HOOK_SECRET"\n'
           'webhook_url = "https://bot.example.com/telegram"\n')


@pytest.mark.parametrize(
    ("content", "key", "expected"),
    [
        ('[channels.telegram]\nenabled = true\nmode = "webhook"\nwebhook_secret_env = "S"\n',
         "channels.telegram.webhook_url", "public https:// URL"),
        ('[channels.telegram]\nenabled = true\nmode = "webhook"\nwebhook_url = "https://x.example/t"\n',
         "channels.telegram.webhook_secret_env", "holding the webhook secret"),
        ('[channels.telegram]\nmode = "hook"\n', "channels.telegram.mode", "'polling' or 'webhook'"),
        ('[channels.telegram]\nwebhook_listen = "8443"\n', "channels.telegram.webhook_listen", "HOST:PORT"),
        ('[channels.telegram]\nwebhook_listen = "0.0.0.0:70000"\n', "channels.telegram.webhook_listen",
         "HOST:PORT"),
        ('[channels.telegram]\nwebhook_url = "bot.example.com"\n', "channels.telegram.webhook_url",
         "https:// URL"),
        (WEBHOOK + '[channels.telegram.accounts.work]\ntoken_env = "WORK"\n'
         'webhook_url = "https://bot.example.com/work"\n',
         "channels.telegram.accounts.work.webhook_listen", "channels.telegram uses '0.0.0.0:8443' too"),
        (WEBHOOK + '[channels.telegram.accounts.work]\ntoken_env = "WORK"\nwebhook_listen = "0.0.0.0:8444"\n',
         "channels.telegram.accounts.work.webhook_url", "channels.telegram uses"),
    ],
)
def test_a_webhook_config_missing_or_sharing_what_it_needs_is_refused_naming_the_key(
    tmp_path: Path, content: str, key: str, expected: str
) -> None:
    """Webhook mode without its URL or secret variable, a malformed address, or two bots on one
    address or URL: refused when the file is read, naming the key."""
    path = tmp_path / "config.toml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.key == key
    assert expected in caught.value.expected


@pytest.mark.parametrize(("value", "expected"), [(None, "HOOK_SECRET is not set"),
                                                 ("has spaces in it", "has other characters")])
def test_a_webhook_secret_unset_or_unusable_stops_the_start_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str
) -> None:
    """The secret is read from its variable at start; unset, or not what Telegram accepts, the
    daemon does not start and says which key, never the value; the variable is scrubbed from logs."""
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456:TEST")
    if value is not None:
        monkeypatch.setenv("HOOK_SECRET", value)
    path = tmp_path / "config.toml"
    path.write_text(WEBHOOK, encoding="utf-8")
    config = load_config(path)
    assert "HOOK_SECRET" in config.secret_env_names()
    with pytest.raises(ConfigError) as caught:
        check_startable(config)
    assert caught.value.key == "channels.telegram.webhook_secret_env"
    assert expected in caught.value.expected
    assert value is None or value not in str(caught.value)
