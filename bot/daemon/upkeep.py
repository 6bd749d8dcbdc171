"""Upkeep of the store while the daemon runs: small steps that keep reads fast, off any turn's path."""

from __future__ import annotations

import asyncio

import structlog

from bot.core.errors import describe
from bot.store.seams import RecallUpkeep

log = structlog.get_logger("switchboard.upkeep")

INDEX_MERGE_INTERVAL = 20.0


async def merge_recall_index(store: RecallUpkeep, interval: float = INDEX_MERGE_INTERVAL) -> None:
    """Every `interval` seconds, one bounded step of merging the recall index's segments (see
    `Store.merge_recall_index`): searches stay as fast as on a freshly optimised index."""
    while True:
        await asyncio.sleep(interval)
        try:
            await store.merge_recall_index()
        except Exception as exc:  # a busy or closing database: the next step tries again
            log.warning("recall index merge failed", error=describe(exc), exc_info=True)
