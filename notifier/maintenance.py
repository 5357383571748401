"""Retention: scrub addresses of finished deliveries, then delete them, expire suppressions
and forget spent budget counters, all in bounded batches."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from notifier.config import RetentionSettings
from notifier.queries import sql

log = logging.getLogger(__name__)

# Advisory lock key for maintenance, so workers on many machines take turns.
MAINTENANCE_LOCK_KEY = int.from_bytes(hashlib.sha256(b"notifier.maintenance").digest()[:8]) >> 1


@dataclass(frozen=True, slots=True)
class CleanupReport:
    scrubbed: int
    deleted: int
    suppressions_expired: int = 0
    counters_forgotten: int = 0
    skipped: bool = False  # another process held the maintenance lock


async def cleanup(pool: Any, settings: RetentionSettings, budget_window: float) -> CleanupReport:
    """Scrub, then delete, batch by batch until nothing is old enough; one run at a time.

    `budget_window` is the request limits' window (NOTIFIER_RESEND_WINDOW): counters older
    than it count for nothing.
    """
    async with pool.acquire() as conn:
        if not await conn.fetchval(sql("try_maintenance_lock"), MAINTENANCE_LOCK_KEY):
            return CleanupReport(0, 0, skipped=True)
        try:
            batch = settings.batch
            report = CleanupReport(
                scrubbed=await _batches(conn, "scrub_finished", settings.scrub_after, batch),
                deleted=await _batches(conn, "delete_finished", settings.retention, batch),
                suppressions_expired=await _batches(conn, "expire_suppressions", None, batch),
                counters_forgotten=await _batches(
                    conn, "forget_request_counts", budget_window, batch
                ),
            )
        finally:
            await conn.execute(sql("maintenance_unlock"), MAINTENANCE_LOCK_KEY)
    if report.scrubbed or report.deleted or report.suppressions_expired:
        log.info(
            "cleanup: scrubbed %d addresses, deleted %d finished deliveries, expired %d "
            "suppressions",
            report.scrubbed,
            report.deleted,
            report.suppressions_expired,
        )
    return report


async def _batches(conn: Any, statement: str, age: float | None, batch: int) -> int:
    total = 0
    while True:
        args = (batch,) if age is None else (age, batch)
        done = int(await conn.fetchval(sql(statement), *args))
        total += done
        if done < batch:
            return total
        await anyio.lowlevel.checkpoint()  # let other work on this loop through between batches


async def run_periodically(pool: Any, settings: RetentionSettings, budget_window: float) -> None:
    """The worker's schedule: a cleanup every `settings.interval` seconds (0: never)."""
    if settings.interval <= 0:
        return
    while True:
        await anyio.sleep(settings.interval)
        try:
            await cleanup(pool, settings, budget_window)
        except Exception as exc:
            log.warning("scheduled cleanup failed (%s); retrying at the next interval", exc)
