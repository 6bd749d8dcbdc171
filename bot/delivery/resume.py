"""What a start picks up where the last run stopped: replies still in the outbox, requests still
waiting for a reply and commands not yet run, queued per session in their order before new input;
and, while running, replies a passing failure left in the outbox, and (several daemons on one
store) the requests an instance that died left waiting.

Only the channels running in this process take part (`switchboard chat` never answers Telegram).
What is older than its channel's `max_reply_age` is not answered late: a request is marked
`late` (shown by `switchboard history`), a reply or command is dropped, each with a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import structlog

from bot.core.errors import describe
from bot.core.messages import inbound_of
from bot.core.session_key import parse as parse_session_key
from bot.delivery.outbox import Outbox
from bot.intake.channel import Channel
from bot.intake.inbox import Inbox
from bot.intake.router import Router, RouterClosedError, Work
from bot.intake.session_lease import LeaseClock
from bot.store import PendingCommand, PendingDelivery, PendingRequest
from bot.store.leases import LIVE_WINDOW
from bot.store.seams import ResumeStore

log = structlog.get_logger("switchboard.resume")

# A reply left over from the last run waits this long for its channel to connect before it is
# tried anyway (a failed try leaves it in the outbox for the next sweep or start).
CONNECT_WAIT = 30.0
# Several daemons on one store: how often each looks for instances that died (where the store can
# tell, `bot.store.leases`), to take over what they left at once.
GONE_CHECK = 1.0
# While running, the outbox is swept this often for replies a passing failure kept from being sent.
SWEEP_INTERVAL = 30.0


@dataclass(frozen=True, slots=True)
class ResumeReport:
    replies: int = 0
    requests: int = 0
    commands: int = 0
    late: int = 0

    def __bool__(self) -> bool:
        return any((self.replies, self.requests, self.commands, self.late))


async def resume(
    store: ResumeStore, router: Router, inbox: Inbox, outbox: Outbox, channels: Mapping[str, Channel]
) -> ResumeReport:
    """Queue everything the last run left undone; call before the channels take new input."""
    replies, late = await redeliver(store, router, inbox, outbox, channels)
    requests = commands = 0

    ready: list[PendingRequest | PendingCommand] = []
    for pending in await store.awaiting_requests():
        provider = parse_session_key(pending.message.session_key).provider
        if provider not in channels:
            continue
        if pending.chat is None or inbox.is_late(provider, pending.message.created_at):
            await store.abandon_request(pending.message.id, "late")
            late += 1
            continue
        ready.append(pending)
    for command in await store.pending_commands():
        if command.inbound.chat.provider not in channels:
            continue
        if inbox.is_late(command.inbound.chat.provider, command.received_at):
            await store.finish_command(command.id, "late")
            late += 1
            continue
        ready.append(command)
    for item in in_order(ready):
        if isinstance(item, PendingCommand):
            inbox.queue_command(item)
            commands += 1
        elif item.chat is not None:
            router.enqueue_turn(item.message, inbound_of(item.message, item.chat))
            requests += 1
    report = ResumeReport(replies, requests, commands, late)
    if report:
        log.info("resumed from the last run", replies=replies, requests=requests, commands=commands,
                 late=late)
    return report


def in_order(items: list[PendingRequest | PendingCommand]) -> list[PendingRequest | PendingCommand]:
    """Requests and commands of a session interleave by position: a command runs after the message
    that was newest when it arrived."""

    def position(item: PendingRequest | PendingCommand) -> float:
        return item.after_message_id + 0.5 if isinstance(item, PendingCommand) else float(item.message.id)

    return sorted(items, key=position)


async def redeliver(
    store: ResumeStore, router: Router, inbox: Inbox, outbox: Outbox, channels: Mapping[str, Channel],
    *, older_than: float = 0.0,
) -> tuple[int, int]:
    """Queue every outbox reply not being sent now (and stored more than `older_than` seconds ago)
    for its channel, in its session's order; drop those past `max_reply_age`. (queued, dropped)

    At start this completes what a crash interrupted; while running (`sweep`), what a passing
    failure (network, a server error) kept from being sent.
    """
    queued = dropped = 0
    now = time.time()
    for delivery in await store.pending_deliveries():
        provider = delivery.outbound.chat.provider
        if provider not in channels or outbox.is_busy(delivery.message_id):
            continue
        if inbox.is_late(provider, delivery.created_at):
            await store.finish_delivery(delivery.message_id)
            log.warning("undelivered reply too old to send; dropped", session_key=delivery.session_key,
                        reply_id=delivery.message_id)
            dropped += 1
            continue
        if now - delivery.created_at < older_than:
            continue
        outbox.claim(delivery.message_id)
        router.enqueue_work(delivery.session_key, "resend reply",
                            _resend(outbox, channels[provider], delivery))
        queued += 1
    return queued, dropped


async def repeat(every: float, step: Callable[[], Awaitable[None]], what: str, *,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Run `step` every `every` seconds (waited with `sleep`) until the router closes; a step that
    fails (a store hiccup) is logged as `what` failing, and the next one tries again."""
    while True:
        await sleep(every)
        try:
            await step()
        except RouterClosedError:
            return
        except Exception as exc:
            log.warning(f"{what} failed", error=describe(exc), exc_info=True)


async def sweep(
    store: ResumeStore, router: Router, inbox: Callable[[], Inbox], outbox: Outbox,
    channels: Mapping[str, Channel],
) -> None:
    """Every SWEEP_INTERVAL seconds, send again the replies a passing failure left in the outbox."""

    async def step() -> None:
        queued, _ = await redeliver(store, router, inbox(), outbox, channels, older_than=SWEEP_INTERVAL)
        if queued:
            log.info("sending undelivered replies again", replies=queued)

    await repeat(SWEEP_INTERVAL, step, "outbox sweep")


async def adopt_waiting(
    store: ResumeStore, router: Router, inbox: Callable[[], Inbox], channels: Mapping[str, Channel],
    every: float, clock: LeaseClock | None = None,
) -> None:
    """Several daemons on one store: every `every` seconds (the lease TTL), queue the requests still
    waiting for a reply and the commands not yet run, older than that, that nothing here has
    queued; and forget leases expired that long ago. Within GONE_CHECK of another instance dying
    (where the store can tell), queue them whatever their age.

    An instance that dies leaves its queue's requests and commands waiting; the others take them
    over only when they queue them (a later message of the session, or a start). This does it
    without either, for sessions no live instance holds the lease of now. One another live
    instance has queued but not reached is harmless to queue too: under the session's lease it is
    answered (or run) once, by whichever comes first. Late ones are marked `late`, as at start.
    Time is read and waited on `clock`, the session leases' (tests move it).
    """
    clock = clock or LeaseClock()
    known_gone: set[str] = set()
    last_round = clock.monotonic()

    async def step() -> None:
        nonlocal last_round
        gone = set(await store.gone_instances(clock.time() - LIVE_WINDOW)) - known_gone
        known_gone.update(gone)
        due = clock.monotonic() - last_round >= every
        if not gone and not due:
            return
        if due:
            last_round = clock.monotonic()
            await store.forget_leases(expired_before=clock.time() - every)
        # An instance died just now (the store can tell): what it left is taken over at once.
        queued = await _adopt(store, router, inbox(), channels, older_than=0.0 if gone else every,
                              now=clock.time())
        if queued:
            log.info("waiting requests taken over", queued=queued, instances_gone=sorted(gone))

    await repeat(min(every, GONE_CHECK), step, "checking waiting requests", sleep=clock.sleep)


async def _adopt(store: ResumeStore, router: Router, inbox: Inbox, channels: Mapping[str, Channel], *,
                 older_than: float, now: float) -> int:
    queued, mine = 0, router.queued_requests()
    # A session some instance holds the lease of is being worked through: it answers them in turn.
    # A command another instance queued may be queued here too: it runs once (`Inbox.queue_command`).
    left: list[PendingRequest | PendingCommand] = [
        *await store.awaiting_requests(unleased_at=now), *await store.pending_commands(unleased_at=now)]
    for item in in_order(left):
        if isinstance(item, PendingCommand):
            provider = item.inbound.chat.provider
            if provider not in channels or now - item.received_at < older_than:
                continue
            if inbox.is_late(provider, item.received_at):
                await store.finish_command(item.id, "late")
            else:
                inbox.queue_command(item)
                queued += 1
            continue
        message, chat = item.message, item.chat
        provider = parse_session_key(message.session_key).provider
        if provider not in channels or chat is None or message.id in mine:
            continue
        if now - message.created_at < older_than:
            continue
        if inbox.is_late(provider, message.created_at):
            await store.abandon_request(message.id, "late")
            continue
        router.enqueue_turn(message, inbound_of(message, chat))
        queued += 1
    return queued


def _resend(outbox: Outbox, channel: Channel, delivery: PendingDelivery) -> Work:
    async def run() -> None:
        ready = getattr(channel, "ready", None)
        if isinstance(ready, asyncio.Event) and not ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), CONNECT_WAIT)
        outbound = delivery.outbound
        if outbox.shared:  # another instance may have sent it (or part of it) meanwhile
            current = await outbox.pending(delivery.message_id)
            if current is None:
                return
            outbound = current.outbound
        await outbox.deliver_again(delivery.message_id, outbound)

    return run
