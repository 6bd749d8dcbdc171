"""`switchboard notes [USER]`: the notes users asked the agent to keep (`remember`), for the admin."""

from __future__ import annotations

import argparse

from bot.cli.base import UsageError, load_config_file, on_database, open_store, utc_time


def list_notes(args: argparse.Namespace) -> int:
    user: str | None = args.user
    if user is not None and (":" not in user or not all(user.split(":", 1))):
        raise UsageError(f"{user!r} is not a user; expected PROVIDER:ID, e.g. telegram:123456789")
    config = load_config_file(args)

    async def show() -> None:
        async with open_store(config) as store:
            if user is None:
                notes = await store.all_notes()
            else:
                provider, user_id = user.split(":", 1)
                notes = await store.notes_of(provider, user_id)
            if not notes:
                print("no notes" + (f" for {user}" if user else ""))
            owner = None
            for note in notes:
                if (note.provider, note.user_id) != owner:
                    owner = (note.provider, note.user_id)
                    print(f"{note.provider}:{note.user_id}")
                print(f"  #{note.id}  {utc_time(note.created_at)}  {note.note}")

    on_database(config, show)
    return 0
