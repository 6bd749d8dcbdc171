"""Operations in process: sd_notify datagrams, config reload under traffic, the control socket,
scheduler reconfiguration, and the store's integrity check, backup and pruning."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sqlite3
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from bot.config import load_config
from bot.core.errors import NotStartedError, StoreError
from bot.core.messages import ChatRef, InboundMessage
from bot.core.session_key import build
from bot.daemon.assembly import Daemon, build_channels
from bot.daemon.control import request, socket_path
from bot.daemon.notify import Notifier
from bot.intake.access import refused_dm_reply
from bot.models.brain import AnthropicBrain
from bot.store import Store
from bot.testing.anthropic_api import AnthropicStandIn, RecordedRequest, Response, Text
from bot.testing.fake_channel import FakeChannel
from bot.testing.telegram_api import TelegramStandIn, private_chat
from bot.testing.telegram_api import user as tg_user
from tests.harness import (
    API_KEY,
    config_data,
    daemon_with,
    last_user_line,
    reply_requests,
    request_text,
    router_of,
    running,
    say,
    wait_until,
)
from tests.sql import execute
from tests.test_cli import ROOT


def toml(data: dict[str, Any]) -> str:
    """A tiny TOML writer for the nested tables and [[schedules]] these tests use."""
    lines: list[str] = []

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(item) for item in v) + "]"
        return repr(v)

    def table(prefix: str, body: dict[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict)}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{k} = {value(v)}" for k, v in scalars.items() if k != "schedules")
        for key, sub in body.items():
            if isinstance(sub, dict):
                table(f"{prefix}.{key}" if prefix else key, sub)

    table("", {k: v for k, v in data.items() if k != "schedules"})
    for job in data.get("schedules", []):
        lines.append("[[schedules]]")
        lines.extend(f"{k} = {value(v)}" for k, v in job.items())
    return "\n".join(lines) + "\n"


@pytest.fixture
def config_file(tmp_path: Path, api: AnthropicStandIn) -> Iterator[Any]:
    """Write config.toml (database in tmp_path, the API stand-in) and return its path."""
    path = tmp_path / "config.toml"

    def write(**sections: Any) -> Path:
        data = config_data(api, **sections)
        data.setdefault("database", {"path": str(tmp_path / "switchboard.db")})
        path.write_text(toml(data), encoding="utf-8")
        return path

    yield write


def slow_echo(request: RecordedRequest) -> Response:
    """Echo, slowly enough that turns are in flight while the test reloads."""
    if request.model != "test-model":
        return Text('{"relevant": []}')
    return Text(f"re: {last_user_line(request)}", delay=0.01)


# -- sd_notify ----------------------------------------------------------------------------------


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(2.0)
    yield sock
    sock.close()


def datagrams(sock: socket.socket, count: int) -> list[dict[str, str]]:
    found = []
    for _ in range(count):
        raw = sock.recv(4096).decode()
        found.append(dict(line.split("=", 1) for line in raw.splitlines()))
    return found


def test_notifier_speaks_the_sd_notify_datagram_protocol(
    tmp_path: Path, notify_socket: socket.socket
) -> None:
    """READY, STATUS, RELOADING (with MONOTONIC_USEC) and STOPPING arrive as KEY=value datagrams."""
    notifier = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    notifier.ready("all up")
    notifier.reloading()
    notifier.stopping()
    ready, reloading, stopping = datagrams(notify_socket, 3)
    notifier.close()
    assert ready == {"READY": "1", "STATUS": "all up"}
    assert reloading["RELOADING"] == "1" and int(reloading["MONOTONIC_USEC"]) > 0
    assert stopping["STOPPING"] == "1"


def test_notifier_reaches_an_abstract_namespace_socket() -> None:
    """A NOTIFY_SOCKET starting with '@' names a socket in the abstract namespace."""
    name = f"switchboard-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2.0)
        notifier = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        notifier.status("hello")
        assert sock.recv(4096) == b"STATUS=hello"
        notifier.close()


def test_notifier_is_a_no_op_outside_systemd() -> None:
    """Without NOTIFY_SOCKET nothing is sent and there is no watchdog interval."""
    notifier = Notifier.from_env({})
    assert not notifier.enabled and notifier.send(READY=1) is False
    assert notifier.watchdog_interval is None


def test_watchdog_interval_is_half_the_timeout_and_only_for_this_process() -> None:
    """WATCHDOG_USEC is halved; a WATCHDOG_PID naming another process turns the pings off."""
    env = {"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "30000000"}
    mine = Notifier.from_env({**env, "WATCHDOG_PID": str(os.getpid())})
    other = Notifier.from_env({**env, "WATCHDOG_PID": "1"})
    assert mine.watchdog_interval == 15.0 and other.watchdog_interval is None


async def test_daemon_sends_ready_once_channels_are_up_then_pings_and_stops(
    tmp_path: Path, notify_socket: socket.socket, api: AnthropicStandIn, config_file: Any
) -> None:
    """The daemon waits for a channel's `ready`, then READY=1, pings WATCHDOG=1, and says STOPPING=1."""
    config = load_config(config_file())
    channel = FakeChannel()
    channel.ready = asyncio.Event()  # type: ignore[attr-defined]
    notifier = Notifier(str(tmp_path / "notify.sock"), watchdog_usec=20_000)
    notify_socket.setblocking(False)
    loop = asyncio.get_running_loop()

    async def next_datagram() -> dict[str, str]:
        raw = (await asyncio.wait_for(loop.sock_recv(notify_socket, 4096), 2)).decode()
        return dict(line.split("=", 1) for line in raw.splitlines())

    daemon = Daemon(config, [channel], brain=AnthropicBrain(config.anthropic, API_KEY), notifier=notifier)
    task = asyncio.create_task(daemon.run())
    try:
        first = [await next_datagram() for _ in range(3)]
        assert all("READY" not in d for d in first), "READY before the channel was up"
        channel.ready.set()  # type: ignore[attr-defined]
        seen: list[dict[str, str]] = []
        while not any("READY" in d for d in seen):
            seen.append(await next_datagram())
        assert "fake connected" in next(d for d in seen if "READY" in d)["STATUS"]
        assert {"WATCHDOG": "1"} in first
    finally:
        daemon.request_stop()
        await asyncio.wait_for(task, 10)
    rest: list[dict[str, str]] = []
    while True:
        try:
            rest.append(dict(line.split("=", 1) for line in notify_socket.recv(4096).decode().splitlines()))
        except BlockingIOError:
            break
    assert any(d.get("STOPPING") == "1" for d in rest)


async def test_a_channel_that_never_connects_delays_ready_only_until_the_timeout(
    api: AnthropicStandIn, config_file: Any
) -> None:
    """READY is reported after the timeout when a channel stays unconnected, and the late one is named."""
    config = load_config(config_file())
    channel = FakeChannel()
    channel.ready = asyncio.Event()  # type: ignore[attr-defined]
    daemon = Daemon(config, [channel], brain=AnthropicBrain(config.anthropic, API_KEY),
                    notifier=Notifier(None), ready_timeout=0.05)
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(daemon.run())
        try:
            await asyncio.wait_for(daemon.ready.wait(), 2)
        finally:
            daemon.request_stop()
            await asyncio.wait_for(task, 10)
    late = [e for e in logs if e["event"].startswith("channels not connected yet")]
    assert late and late[0]["channels"] == ["fake"]


# -- reload ------------------------------------------------------------------------------------


async def test_reload_under_traffic_answers_every_message_once_and_applies_the_new_limit_next_turn(
    api: AnthropicStandIn, config_file: Any
) -> None:
    """Messages keep flowing while config.toml changes and reloads: each is answered exactly once,
    turns started after the reload use the new history limit, turns before it the old one."""
    api.default = slow_echo
    path = config_file(conversation={"history_limit": 0})
    channel = FakeChannel()
    peers = ["1", "2", "3"]
    per_peer = 12
    async with daemon_with(load_config(path), channel) as daemon:
        reloaded = asyncio.Event()

        async def stream(peer: str) -> None:
            for i in range(per_peer):
                if i == per_peer // 2:
                    await reloaded.wait()  # half before the reload, half after
                await channel.inject(channel.message(f"{peer}-{i}", peer=peer, sender=peer,
                                                     message_id=f"{peer}-{i}"))
                await asyncio.sleep(0.002)

        producers = [asyncio.create_task(stream(peer)) for peer in peers]
        await wait_until(lambda: len(channel.sent) >= 4)
        config_file(conversation={"history_limit": 1})
        outcome = await daemon.reload()
        reloaded.set()
        assert outcome["reloaded"] is True and outcome["changed"] == ["conversation"]
        assert outcome["restart_required"] == []
        await asyncio.gather(*producers)
        await router_of(daemon).idle()
        await say(daemon, channel, "after", peer="1", sender="1")

    expected = sorted([f"re: {p}-{i}" for p in peers for i in range(per_peer)] + ["re: after"])
    assert sorted(m.text for m in channel.sent) == expected
    async with Store.open(load_config(path).database_path()) as store:
        for peer in peers:
            limits = [s.snapshot["history_limit"] for s in await store.snapshots(str(channel.key(peer=peer)))]
            # Old limit first, the new one from some turn on, never back.
            switch = limits.index(1)
            assert switch > 0 and set(limits[:switch]) == {None} and set(limits[switch:]) == {1}
    after = next(r for r in reply_requests(api) if last_user_line(r) == "after")
    # One turn of history leaves out peer 1's first messages, which an unlimited turn did include.

    def mentions_early(request: RecordedRequest) -> bool:
        return re.search(r"(?<![\d-])1-[0-3](?!\d)", request_text(request)) is not None

    assert not mentions_early(after)
    assert mentions_early(next(r for r in reply_requests(api) if last_user_line(r) == "1-4"))


async def test_an_invalid_edit_is_rejected_with_the_error_logged_and_the_old_config_stays(
    api: AnthropicStandIn, config_file: Any
) -> None:
    """A reload of a broken file logs the ConfigError (file and key), and turns keep the old limit."""
    path = config_file(conversation={"history_limit": 2})
    channel = FakeChannel()
    async with daemon_with(load_config(path), channel) as daemon:
        before = daemon.config
        path.write_text(path.read_text().replace("history_limit = 2", "history_limit = -1"))
        with structlog.testing.capture_logs() as logs:
            outcome = await daemon.reload()
        await say(daemon, channel, "still here")
        status = await daemon.status()
    assert outcome["reloaded"] is False
    assert str(path) in outcome["error"] and "conversation.history_limit" in outcome["error"]
    (rejected,) = [e for e in logs if e["log_level"] == "error"]
    assert rejected["event"].startswith("config reload rejected") and rejected["error"] == outcome["error"]
    assert daemon.config is before
    assert [m.text for m in channel.sent] == ["re: still here"]
    assert status["last_reload"]["reloaded"] is False
    async with Store.open(before.database_path()) as store:
        (snapshot,) = await store.snapshots(str(channel.key()))
    assert snapshot.snapshot["history_limit"] == 2


async def test_keys_wired_for_the_daemons_lifetime_wait_for_a_restart(
    api: AnthropicStandIn, config_file: Any
) -> None:
    """A reload changing the model or concurrency keeps the running values and names them for a restart."""
    path = config_file()
    channel = FakeChannel()
    async with daemon_with(load_config(path), channel) as daemon:
        config_file(anthropic={"model": "other-model"}, router={"max_concurrent_turns": 2},
                    conversation={"lookback_count": 7})
        outcome = await daemon.reload()
        await say(daemon, channel, "hello")
    assert outcome["reloaded"] and outcome["restart_required"] == ["anthropic", "router.max_concurrent_turns"]
    assert daemon.config.anthropic.model == "test-model" and daemon.config.conversation.lookback_count == 7
    assert [r.model for r in reply_requests(api)] == ["test-model"]


async def test_reload_adds_changes_and_removes_schedules(api: AnthropicStandIn, config_file: Any) -> None:
    """Jobs added by a reload are scheduled, a changed one is rescheduled, a removed one is gone."""
    job = {"id": "brief", "every": "1h", "prompt": "news", "deliver_to": "console:local"}
    path = config_file()
    channel = FakeChannel("console")
    async with daemon_with(load_config(path), channel) as daemon:
        assert (await daemon.status())["schedules"] == []
        config_file(schedules=[job])
        await daemon.reload()
        (added,) = (await daemon.status())["schedules"]
        config_file(schedules=[{"id": "brief", "cron": "17 4 * * *", "prompt": "news",
                                "deliver_to": "console:local"}])
        await daemon.reload()
        (changed,) = (await daemon.status())["schedules"]
        config_file(schedules=[{**job, "enabled": False}])
        await daemon.reload()
        (disabled,) = (await daemon.status())["schedules"]
        config_file()
        await daemon.reload()
        removed = (await daemon.status())["schedules"]
    assert added["id"] == "brief" and added["next_run"] is not None and added["runnable"]
    assert changed["next_run"] is not None and changed["next_run"].endswith(":17:00+00:00")
    assert added["next_run"].endswith(":00:00+00:00")
    assert disabled["enabled"] is False and disabled["next_run"] is None
    assert removed == []


async def test_reload_applies_access_lists_and_turns_a_channel_off_and_on_losing_nothing(
    api: AnthropicStandIn, config_file: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload that allows a new user lets them in at once; one that disables Telegram stops it,
    and enabling it again answers what was sent meanwhile."""
    async with TelegramStandIn() as tg:
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", tg.token)

        def telegram(**section: Any) -> dict[str, Any]:
            return {"channels": {"telegram": {"enabled": True, "base_url": tg.base_url, **section}}}

        ada, bea = tg_user(42, "Ada"), tg_user(7, "Bea")
        path = config_file(**telegram(allow_from=[42]))
        config = load_config(path)
        brain = AnthropicBrain(config.anthropic, API_KEY)
        async with running(config, build_channels(config, console=False), brain) as daemon:
            tg.push_message(private_chat(bea), bea, "let me in")
            await tg.wait_for(lambda: [m for m in tg.sent if m.chat_id == 7])
            config_file(**telegram(allow_from=[42, 7]))
            assert (await daemon.reload())["changed"] == ["channels"]
            tg.push_message(private_chat(bea), bea, "now?")
            await tg.wait_for(lambda: len([m for m in tg.sent if m.chat_id == 7]) == 2)

            config_file(**telegram(enabled=False, allow_from=[42, 7]))
            await daemon.reload()
            off = await daemon.status()
            tg.push_message(private_chat(ada), ada, "while you were away")
            config_file(**telegram(allow_from=[42, 7]))
            await daemon.reload()
            await tg.wait_for(lambda: [m for m in tg.sent if m.chat_id == 42])
            on = await daemon.status()
    assert [m.visible_text for m in tg.sent if m.chat_id == 7] == [refused_dm_reply("7"), "re: now?"]
    assert off["channels"] == []
    assert on["channels"] == [{"provider": "telegram", "state": "connected", "error": None, "restarts": 0}]
    assert [m.visible_text for m in tg.sent if m.chat_id == 42] == ["re: while you were away"]


# -- control socket ------------------------------------------------------------------------------


async def test_status_and_reload_over_the_control_socket(api: AnthropicStandIn, config_file: Any) -> None:
    """The daemon answers `status` (channels, queues) and `reload` on a 0600 socket beside the database."""
    path = config_file()
    config = load_config(path)
    channel = FakeChannel()
    sock = socket_path(config.database_path())
    async with daemon_with(config, channel) as daemon:
        await say(daemon, channel, "hi")
        mode = stat.S_IMODE(os.stat(sock).st_mode)
        status = await asyncio.to_thread(request, sock, "status")
        reload = await asyncio.to_thread(request, sock, "reload")
        unknown = await asyncio.to_thread(request, sock, "explode")
    assert mode == 0o600
    assert status["ok"] and status["pid"] == os.getpid() and status["agent"] == "main"
    assert status["channels"] == [{"provider": "fake", "state": "connected", "error": None, "restarts": 0}]
    assert status["queue"] == {"pending": 0, "sessions": {}}
    assert reload == {"ok": True, "reloaded": True, "changed": [], "restart_required": []}
    assert unknown["ok"] is False and "unknown command" in unknown["error"]
    assert not sock.exists()


async def test_status_reaches_a_daemon_whose_state_directory_is_deeper_than_a_socket_path(
    api: AnthropicStandIn, config_file: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database more than 107 bytes deep (a unix socket's limit) still gets a control socket:
    `switchboard status` reaches the daemon instead of both ending in "AF_UNIX path too long"."""
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 4) / "switchboard.db"
    deep.parent.mkdir(parents=True)
    runtime = Path(tempfile.mkdtemp(prefix="sb-run-"))  # short, as /run/user/<uid> is
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    path = config_file(database={"path": str(deep)})
    config = load_config(path)
    sock = socket_path(config.database_path())
    async with daemon_with(config, FakeChannel()):
        code, out = await _switchboard(tmp_path, "status", "--config", str(path))
        mode = stat.S_IMODE(os.stat(sock).st_mode)
    assert len(os.fsencode(deep.parent / "switchboard.sock")) > 107
    assert sock.parent == runtime and mode == 0o600
    assert code == 0 and f"pid {os.getpid()}" in out, out
    assert not sock.exists()
    await asyncio.to_thread(runtime.rmdir)


async def test_reload_says_what_it_applied_and_what_waits_for_a_restart(
    api: AnthropicStandIn, config_file: Any, tmp_path: Path
) -> None:
    """`switchboard reload` after editing a key only a restart applies says so, not "changed
    nothing" and then "restart to apply"; an edit applied at once is named as applied."""
    path = config_file()
    config = load_config(path)
    async with daemon_with(config, FakeChannel()):
        config_file(anthropic={"model": "test-model-2"})
        waits = await _switchboard(tmp_path, "reload", "--config", str(path))
        config_file(anthropic={"model": "test-model-2"}, conversation={"history_limit": 7})
        applied = await _switchboard(tmp_path, "reload", "--config", str(path))
    assert waits == (0, f"reloaded {path}: nothing applied now\n"
                        "changed, but applied only by a restart of the daemon: anthropic\n")
    assert applied[0] == 0 and applied[1].startswith(f"reloaded {path}: applied conversation\n")


async def _switchboard(cwd: Path, *args: str) -> tuple[int, str]:
    """The command as a subprocess, off the event loop the daemon under test runs on."""
    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, cwd=cwd, env=environ,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None, err
    return process.returncode, out.decode()


async def test_status_shows_queued_work_per_session(api: AnthropicStandIn, config_file: Any) -> None:
    """While a turn runs, status shows the session as running with the messages waiting behind it."""
    api.default = lambda request: Text("ok", delay=0.2)
    channel = FakeChannel()
    async with daemon_with(load_config(config_file()), channel) as daemon:
        for i in range(3):
            await channel.inject(channel.message(f"m{i}", message_id=f"m{i}"))
        status = await daemon.status()
        await router_of(daemon).idle()
    key = str(channel.key())
    assert status["queue"] == {"pending": 3, "sessions": {key: {"running": True, "waiting": 2}}}


# -- the store: integrity, backup, prune ------------------------------------------------------------


async def _fill(path: Path, *, sessions: int = 2, turns: int = 10, age_days: float = 30) -> list[str]:
    """Sessions with `turns` answered DM turns each, all `age_days` old, with snapshots and platform ids."""
    async with Store.open(path) as store:
        return await _fill_store(store, sessions=sessions, turns=turns, age_days=age_days)


async def _fill_store(store: Store, *, sessions: int = 2, turns: int = 10, age_days: float = 30) -> list[str]:
    keys = []
    for s in range(sessions):
        key = build("main", "telegram", "direct", 100 + s)
        keys.append(str(key))
        chat = ChatRef("telegram", str(100 + s))
        for t in range(turns):
            stored = await store.append_inbound(InboundMessage(
                session_key=key, chat=chat, sender_id=str(100 + s), sender_name="Ada",
                text=f"q{t}", provider_message_id=f"{s}-{t}",
            ))
            assert stored is not None
            reply = await store.append_reply(str(key), f"a{t}", request_id=stored.id)
            await store.mark_delivered(reply.id, chat, [f"r{s}-{t}"])
            await store.record_snapshot(str(key), stored.id, reply.id, {"t": t}, "h")
    await execute(store, "UPDATE messages SET created_at = ?", (time.time() - age_days * 86400,))
    return keys


async def test_prune_keeps_what_the_limits_need_and_every_foreign_key_valid(store: Store) -> None:
    """Old messages go, except each session's newest lookback messages and history-limit turns;
    their snapshots and platform ids go with them; a dry run deletes nothing."""
    first, second = await _fill_store(store)
    before = await store.history(first, 100)
    dry = await store.prune_interactive(time.time() - 86400, keep_recent=5, keep_turns={}, dry_run=True)
    assert await store.message_count() == 40
    report = await store.prune_interactive(time.time() - 86400, keep_recent=5, keep_turns={second: 4})
    assert await store.foreign_key_problems() == 0
    kept_first = await store.history(first, 100)
    kept_second = await store.history(second, 100)
    summary = await store.session(first)
    snapshots = await store.snapshots(first)
    gone = await store.message_by_provider_id(ChatRef("telegram", "100"), "0-0")
    kept = await store.message_by_provider_id(ChatRef("telegram", "100"), "0-9")
    assert dry.dry_run and dry.messages_by_session == {first: 15, second: 15}
    assert report.messages_by_session == {first: 15, second: 12}
    assert kept_first == before[-5:]
    assert [m.text for m in kept_second] == ["q6", "a6", "q7", "a7", "q8", "a8", "q9", "a9"]
    assert (summary.message_count, summary.user_turns) == (5, 2)  # a7 q8 a8 q9 a9
    assert [s.snapshot["t"] for s in snapshots] == [8, 9]  # a snapshot goes when its request goes
    assert report.snapshots == 8 + 6
    assert gone is None and kept is not None


async def test_prune_spares_recent_messages_waiting_requests_and_scheduled_output(store: Store) -> None:
    """Messages newer than the cutoff, requests still awaiting a reply and scheduled outputs stay."""
    (key,) = await _fill_store(store, sessions=1, turns=4, age_days=1)
    await store.append_reply(key, "briefing", origin="scheduled", job_id="brief")
    waiting = await store.append_inbound(InboundMessage(
        session_key=build("main", "telegram", "direct", 100), chat=ChatRef("telegram", "100"),
        sender_id="100", sender_name="Ada", text="unanswered", provider_message_id="w"))
    await execute(store, "UPDATE messages SET created_at = ?", (time.time() - 30 * 86400,))
    young = await store.prune_interactive(time.time() - 60 * 86400, keep_recent=0, keep_turns={})
    report = await store.prune_interactive(time.time() - 86400, keep_recent=0, keep_turns={})
    left = await store.history(key, 100)
    assert young.messages == 0
    assert report.messages == 8
    assert waiting is not None and [m.text for m in left] == ["briefing", "unanswered"]


async def test_backup_copies_the_database_while_it_is_in_use(tmp_path: Path) -> None:
    """An online backup made while the store is open holds every message, checks clean and is private."""
    path = tmp_path / "switchboard.db"
    await _fill(path, sessions=1, turns=3)
    target = tmp_path / "backup.db"
    async with Store.open(path) as store:
        await store.append_reply(str(build("main", "telegram", "direct", 100)), "fresh")
        await store.backup_to(target)
        with pytest.raises(FileExistsError):
            await store.backup_to(target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    async with Store.open(target) as copy:
        await copy.check_integrity()
        assert await copy.message_count() == 7


def corrupt(path: Path) -> None:
    """Overwrite the messages table's root page with garbage (the file header stays intact)."""
    with sqlite3.connect(path) as conn:
        # Pages still in the WAL would be read instead of the damaged ones in the main file.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    with open(path, "r+b") as raw:
        raw.seek((root - 1) * page_size)
        raw.write(os.urandom(page_size))


async def test_a_damaged_database_stops_the_daemon_with_a_clear_error(
    tmp_path: Path, api: AnthropicStandIn, config_file: Any
) -> None:
    """quick_check at start finds the damage: StoreError names the file and says to restore a backup."""
    path = config_file()
    config = load_config(path)
    await _fill(config.database_path(), sessions=1, turns=20)
    corrupt(config.database_path())
    daemon = Daemon(config, [FakeChannel()], brain=AnthropicBrain(config.anthropic, API_KEY),
                    notifier=Notifier(None))
    with pytest.raises(StoreError) as caught:
        await asyncio.wait_for(daemon.run(), 10)
    message = str(caught.value)
    assert str(config.database_path()) in message and "damaged" in message and "backup" in message



async def test_a_channel_calling_the_daemon_before_it_started_is_told_so(config_file: Any) -> None:
    """The intake host's calls before `run` has opened the store raise NotStartedError naming the
    daemon (not an AttributeError on None, nor an assert that `python -O` drops)."""
    config = load_config(config_file())
    daemon = Daemon(config, [FakeChannel()], notifier=Notifier(None))
    inbound = InboundMessage(session_key=build("main", "telegram", "direct", 7),
                             chat=ChatRef("telegram", "7"), sender_id="7", sender_name="Ada", text="hi",
                             provider_message_id="1")
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: daemon.submit(inbound), lambda: daemon.keep_file(b"x"),
        lambda: daemon.catch_up_points("telegram", 0.0),
        lambda: daemon.quarantine("telegram", None, "{}", "bad"),
        lambda: daemon.pair("telegram", "7", "7", None),
    ]
    for call in calls:
        with pytest.raises(NotStartedError, match="the daemon has not started"):
            await call()
