"""Each backend's numbered migrations: SQL files in its package, applied in order on open and
recorded in `schema_migrations`; append-only, never edited.

`sqlite/migrations/` and `postgres/migrations/` hold `NNNN_name.sql`, one file per number, the same
numbers in both (the same change in each backend's terms; a number with nothing to do on one
backend is a file of comments only). The files are package data, read through importlib.resources,
so an installed Switchboard finds them as a checkout does.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

from bot.core.errors import StoreError

_NAME = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


@cache
def migrations(backend: str) -> tuple[str, ...]:
    """The SQL of every migration of `backend` ("sqlite" or "postgres"), migration 1 first.

    StoreError when the files are missing or not numbered 1, 2, 3, … without a gap.
    """
    folder = resources.files(f"bot.store.{backend}").joinpath("migrations")
    named = sorted((match.group(1), entry) for entry in folder.iterdir()
                   if (match := _NAME.fullmatch(entry.name)))
    numbers = [int(number) for number, _ in named]
    if not numbers or numbers != list(range(1, len(numbers) + 1)):
        raise StoreError(f"the {backend} migrations of this Switchboard are missing or misnumbered "
                         f"({numbers}); reinstall it")
    return tuple(entry.read_text(encoding="utf-8") for _, entry in named)


def is_empty(sql: str) -> bool:
    """Whether a migration has no statement (comments only): only its number is recorded."""
    return not any(line.strip() and not line.lstrip().startswith("--") for line in sql.splitlines())
