"""The conversation commands: sessions, history, a turn's context, replay and compaction."""

from __future__ import annotations

import argparse
import asyncio

from bot.cli.base import load_config_file, on_database, open_store, setup_logging, utc_time
from bot.cli.context_view import context_lines
from bot.core.media import with_labels
from bot.core.session_key import parse


def list_sessions(args: argparse.Namespace) -> int:
    config = load_config_file(args)

    async def show() -> None:
        async with open_store(config) as store:
            sessions = await store.list_sessions(args.agent)
            if not sessions:
                print(f"no sessions of agent {args.agent!r} yet" if args.agent else "no sessions yet")
            for s in sessions:
                print(f"{s.key}  messages={s.message_count}  turns={s.user_turns}  "
                      f"last={utc_time(s.updated_at)}")

    asyncio.run(show())
    return 0


def show_history(args: argparse.Namespace) -> int:
    config = load_config_file(args)
    key = str(parse(args.session_key))

    async def show() -> None:
        async with open_store(config) as store:
            await store.session(key)
            for m in await store.history(key, args.limit):
                who = (m.sender_name or m.sender_id or "user") if m.role == "user" else "agent"
                origin = ""
                if m.origin == "scheduled":
                    origin = f" [scheduled {m.job_id}]" if m.job_id else " [scheduled]"
                status = f" [not answered: {m.unanswered}]" if m.unanswered else ""
                text = with_labels(m.text, m.media)
                print(f"#{m.id} {utc_time(m.created_at)} {who}{origin}{status}: {text}")

    asyncio.run(show())
    return 0


def show_context(args: argparse.Namespace) -> int:
    import json

    from bot.context.turn_explained import TurnRead, context_record, read_turn

    config = load_config_file(args)
    setup_logging(config, quiet=True)  # an unreadable snapshot's warning goes to stderr
    key = str(parse(args.session_key))

    async def read() -> TurnRead:
        async with open_store(config) as store:
            await store.session(key)
            return await read_turn(store, key, args.turn or 0)

    turn = on_database(config, read)
    record, total, messages = turn.record, turn.total, turn.messages
    if args.json:
        print(json.dumps(context_record(key, record, total, messages), indent=2, ensure_ascii=False))
    else:
        print("\n".join(context_lines(record, total, messages, full=args.full)))
    return 0


def replay_turn(args: argparse.Namespace) -> int:
    from bot.context.replay import replay
    from bot.context.replay_settings import changed_settings
    from bot.models.brain import AnthropicBrain

    config = load_config_file(args)
    setup_logging(config, quiet=True)  # skipped rows and snapshots are warned about on stderr
    key = str(parse(args.session_key))

    async def run() -> int:
        async with open_store(config) as store:
            await store.session(key)
            # No key: replay never calls a model (triage answers come from the snapshot).
            result = await replay(config, store, AnthropicBrain(config.anthropic, None), key,
                                  args.turn or 0)
            gone = [i for i in result.recorded_ids if await store.message_by_id(i) is None]
        record, rebuilt = result.record, result.rebuilt
        print(f"turn {record.turn}: hash recorded {record.hash or '(none)'}, "
              f"rebuilt {rebuilt.input_hash}")
        print(f"entries recorded {len(result.recorded_ids)}, rebuilt {len(result.rebuilt_ids)}")
        if result.matches:
            print("match")
            return 0
        missing, extra = result.only_recorded, result.only_rebuilt
        print("MISMATCH")
        if record.snapshot.get("status") == "failed":
            print(f"the turn failed to build its context: {record.snapshot.get('error')}")
        for line in changed_settings(record.snapshot.get("settings"), config.for_session(key)):
            print(f"setting changed since: {line}")
        for message_id in gone:
            print(f"input gone since: message #{message_id} is no longer stored (pruned)")
        print("only recorded: " + (" ".join(f"#{i}" for i in missing) or "-"))
        print("only rebuilt:  " + (" ".join(f"#{i}" for i in extra) or "-"))
        return 1

    code: int = on_database(config, run)
    return code


def compact_session(args: argparse.Namespace) -> int:
    from bot.context.builder import ContextBuilder
    from bot.context.compaction import Compactor
    from bot.models.brain import AnthropicBrain

    key = str(parse(args.session_key))
    config = load_config_file(args).for_session(key)  # summarised as the session's agent would
    setup_logging(config, quiet=True)

    async def run() -> int:
        brain = AnthropicBrain(config.anthropic, config.anthropic.api_key())
        try:
            async with open_store(config) as store:
                await store.session(key)
                budget = ContextBuilder(config, store, brain).budget
                outcome = await Compactor(config, store, brain, budget).compact(key)
        finally:
            await brain.aclose()
        record = outcome.record
        if record is None:
            print(outcome.reason)
            return 0
        print(f"compaction #{record.id}: summarised {outcome.summarised} messages "
              f"(up to #{record.last_summarised_id}) in {outcome.calls} calls; "
              f"~{record.tokens_before} -> ~{record.tokens_after} tokens; "
              f"context now starts at #{record.first_kept_message_id}")
        print(record.summary)
        return 0

    return asyncio.run(run())
