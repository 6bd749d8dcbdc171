"""Database care: an online backup, and pruning old conversation messages."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bot.cli.base import load_config_file, on_database, open_store
from bot.errors import BotError
from bot.session_key import parse


def db_usage(args: argparse.Namespace) -> int:
    print("usage: switchboard db backup PATH [--force] | switchboard db prune --older-than DAYS "
          "[--dry-run]", file=sys.stderr)
    return 2


def backup(args: argparse.Namespace) -> int:
    import sqlite3

    from bot.store import Store

    config = load_config_file(args)
    target = Path(args.path)
    if target.exists() and not args.force:
        raise BotError(f"{target} already exists; choose a new file or pass --force to replace it")
    # Written beside the target, then renamed: a failed backup never leaves half a file behind.
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)

    async def copy() -> int:
        async with open_store(config) as store:
            await store.backup_to(partial)
        async with Store.open(partial) as copied:
            await copied.check_integrity()
            return await copied.message_count()

    try:
        count = on_database(config, copy)
        os.replace(partial, target)
    except (OSError, sqlite3.Error) as exc:
        raise BotError(f"backup to {target} failed: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    print(f"backed up {config.database_path()} to {target} ({count} messages)")
    return 0


def prune(args: argparse.Namespace) -> int:
    from bot.config import resolve_history_limit

    config = load_config_file(args)
    before = time.time() - args.older_than * 86400

    async def prune() -> None:
        async with open_store(config) as store:
            keep_turns: dict[str, int] = {}
            for session in await store.list_sessions():
                try:
                    keep_turns[session.key] = resolve_history_limit(config, parse(session.key)) or 0
                except BotError:
                    continue  # a key this version cannot read: the lookback floor still applies
            report = await store.prune_interactive(
                before, keep_recent=config.conversation.lookback_count, keep_turns=keep_turns,
                dry_run=args.dry_run,
            )
        verb = "would remove" if report.dry_run else "removed"
        print(f"{verb} {report.messages} message(s) older than {args.older_than} day(s) and "
              f"{report.snapshots} context snapshot(s); kept the newest "
              f"{config.conversation.lookback_count} messages and the history-limit turns of each session")
        for key, count in report.messages_by_session.items():
            print(f"  {key}  {count}")

    on_database(config, prune)
    return 0
