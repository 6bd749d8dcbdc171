"""Database care: an online backup, a copy to or from PostgreSQL, pruning old messages and
unreferenced files, sentence embeddings."""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from bot.cli.base import control_path, load_config_file, on_database, open_store, setup_logging
from bot.core.errors import BotError, describe
from bot.core.session_key import parse

if TYPE_CHECKING:
    from bot.config import Config
    from bot.store import Store
    from bot.store.copying import TableCount


def db_usage(args: argparse.Namespace) -> int:
    print("usage: switchboard db backup PATH [--force] | switchboard db prune [--older-than DAYS] "
          "[--dry-run] | switchboard db embed [--rebuild] | switchboard db copy --to URL|PATH",
          file=sys.stderr)
    return 2


def backup(args: argparse.Namespace) -> int:
    import sqlite3

    from bot.media.files import files_dir
    from bot.store import SqliteStore
    from bot.store.copying import copy_kept_files

    config = load_config_file(args)
    if config.database.url is not None:
        raise BotError("`db backup` copies the SQLite file; this config uses PostgreSQL ([database] url): "
                       "back it up with pg_dump (or the server's own backups)")
    target = Path(args.path)
    if target.exists() and not args.force:
        raise BotError(f"{target} already exists; choose a new file or pass --force to replace it")
    if not target.parent.is_dir():
        raise BotError(f"cannot back up to {target}: the folder {target.parent} does not exist")
    # Written beside the target, then renamed: a failed backup never leaves half a file behind.
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)

    async def copy() -> tuple[int, TableCount]:
        async with open_store(config) as store:
            await store.backup_to(partial)
            async with SqliteStore.open(partial) as copied:
                await copied.check_integrity()
                # The pictures and files its messages refer to, into `files/` beside the copy
                # (shared with other backups there: each is kept under its sha256).
                files = await copy_kept_files(store, copied)
                return await copied.message_count(), files

    try:
        count, files = on_database(config, copy)
        os.replace(partial, target)
    except (OSError, sqlite3.Error) as exc:
        # Named by the file asked for, not by the partial file it is written to first.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise BotError(f"backup to {target} failed: {reason}") from exc
    finally:
        partial.unlink(missing_ok=True)
    if files.target != files.source:
        raise BotError(f"backup to {target}: {files.source} kept files found but {files.target} "
                       f"copied to {files_dir(target)}")
    print(f"backed up {config.database_path()} to {target} ({count} messages, {files.target} kept "
          f"files in {files_dir(target)})")
    return 0


def prune(args: argparse.Namespace) -> int:
    from bot.core.media import size_text

    config = load_config_file(args)

    async def prune() -> None:
        async with open_store(config) as store:
            if args.older_than is not None:
                await _prune_messages(config, store, args)
            referenced = await store.referenced_files()
            # Files are removed after the messages that referred to them.
            count, size = await store.kept_files().prune(referenced, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        print(f"{verb} {count} kept file(s) ({size_text(size)}) that no stored message refers to; "
              f"{len(referenced)} referenced file(s) stay")

    on_database(config, prune)
    return 0


async def _prune_messages(config: Config, store: Store, args: argparse.Namespace) -> None:
    """Old interactive messages no history limit or lookback still reaches."""
    from bot.config import resolve_history_limit

    before = time.time() - args.older_than * 86400
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


def embed(args: argparse.Namespace) -> int:
    """Compute the sentence vectors semantic recall needs for every stored message that lacks one."""
    from bot.context.embed_worker import embed_backlog
    from bot.ranking.embedding import HOW_TO_INSTALL, Embedder, model_files, unavailable_reason

    config = load_config_file(args)
    setup_logging(config, quiet=True)  # warnings only, on stderr: the command prints its own lines
    if config.semantic.enabled == "off":
        raise BotError(f'{config.source}: [semantic].enabled is "off", so nothing would read the vectors; '
                       'set it to "auto" or "on" first')
    reason = unavailable_reason(config)
    files = model_files(config)
    if reason is not None or files is None:
        raise BotError(f"cannot embed: {reason}; install them with {HOW_TO_INSTALL}")
    started = time.perf_counter()
    try:
        embedder = Embedder.load(files)
    except Exception as exc:  # a damaged or foreign file: the libraries raise their own types
        raise BotError(f"cannot load the model at {files.archive or files.directory}: "
                       f"{describe(exc)}") from exc
    live = sys.stderr.isatty()

    async def fill() -> tuple[int, int]:
        async with open_store(config) as store:
            cleared = await store.clear_embeddings() if args.rebuild else 0
            total = await store.count_pending_embeddings(embedder.model_id)

            def progress(done: int) -> None:
                if live:
                    print(f"\rembedding: {done}/{total} messages", end="", file=sys.stderr, flush=True)

            done = await embed_backlog(store, embedder, batch_size=config.semantic.batch_size,
                                       progress=progress)
            if live and done:
                print(file=sys.stderr)
            return cleared, done

    cleared, done = on_database(config, fill)
    seconds = time.perf_counter() - started
    dropped = f"dropped {cleared} vector(s), then " if args.rebuild else ""
    print(f"{dropped}embedded {done} message(s) with {embedder.model_id} in {seconds:.1f} s; "
          "every stored message now has its vector")
    return 0


def copy(args: argparse.Namespace) -> int:
    """Copy the configured database into a new, empty one (PostgreSQL or an SQLite file), then
    count every table on both sides; exit 1 when a count differs."""
    from bot.store.copying import copy_store

    config = load_config_file(args)
    setup_logging(config, quiet=True)  # warnings only, on stderr: the command prints its own lines
    target, partial = _copy_target(config, args.to)
    live = sys.stderr.isatty()

    def progress(table: str, rows: int) -> None:
        if live:
            print(f"\rcopying {table}: {rows} rows\033[K", end="", file=sys.stderr, flush=True)

    async def run() -> list[TableCount]:
        async with open_store(config) as source:
            await _refuse_while_running(config, source)
            async with _open_target(config, target, partial) as opened:
                try:
                    return await copy_store(source, opened, progress=progress)
                finally:
                    if live:
                        print("\r\033[K", end="", file=sys.stderr, flush=True)

    try:
        counts = on_database(config, run)
        if partial is not None and all(c.source == c.target for c in counts):
            os.replace(partial, target)
    finally:
        if partial is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{partial}{suffix}").unlink(missing_ok=True)
    width = max(len(c.table) for c in counts)
    print(f"copied {config.database.url or config.database_path()} to {target}")
    print(f"  {'table':<{width}}  {'source':>10}  {'target':>10}")
    for c in counts:
        mark = "" if c.source == c.target else "  DIFFERS"
        print(f"  {c.table:<{width}}  {c.source:>10}  {c.target:>10}{mark}")
    differ = [c.table for c in counts if c.source != c.target]
    if differ:
        print(f"switchboard: counts differ in {', '.join(differ)}; do not use the copy", file=sys.stderr)
        return 1
    messages = next((c.target for c in counts if c.table == "messages"), 0)
    files = next((c.target for c in counts if c.table == "kept files"), 0)
    print(f"every table's rows counted equal on both sides ({len(counts) - 1} tables, {messages} messages, "
          f"{files} kept files)")
    return 0


def _copy_target(config: Config, to: str) -> tuple[str, Path | None]:
    """`--to` checked: a PostgreSQL URL without a password, or an SQLite file (written beside
    itself first when new, so a failed copy leaves no file behind: the second value)."""
    from bot.config.fields import postgres_url_problem

    if "://" in to:
        problem = postgres_url_problem(to)
        if problem is not None:
            text, secret = problem
            if secret:  # never echo it: the command line may be in a shell history already
                raise BotError("--to must be a URL without a password: give the password in PGPASSWORD "
                               "or ~/.pgpass (libpq reads both)")
            raise BotError(f"--to {to}: expected {text.removeprefix('Value error, ')}")
        if to == config.database.url:
            raise BotError("--to names the configured database itself; give a new, empty one")
        return to, None
    path = Path(to)
    if config.database.url is None and path.exists() and path.resolve() == config.database_path().resolve():
        raise BotError("--to names the configured database itself; give a new file")
    if path.exists():
        return to, None
    return to, path.with_name(f".{path.name}.partial")


def _open_target(config: Config, target: str, partial: Path | None) -> AbstractAsyncContextManager[Store]:
    from bot.store import SqliteStore

    if "://" not in target:
        if partial is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{partial}{suffix}").unlink(missing_ok=True)
        return SqliteStore.open(partial or Path(target))
    from bot.store.postgres import PostgresStore

    return PostgresStore.connect(target, state_path=config.database_path(), label=target)


async def _refuse_while_running(config: Config, source: Store) -> None:
    """A daemon still writing would add messages the copy misses: it must be stopped first."""
    from bot.daemon.control import answers
    from bot.store.leases import LIVE_WINDOW

    alive = await source.instances(time.time() - LIVE_WINDOW)
    if answers(control_path(config)) or alive:
        raise BotError("the daemon is running on this database; stop it first (what it stores "
                       "during the copy would not be copied)")
