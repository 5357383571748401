"""Retention: scrub what finished deliveries say of people, then delete them, expire
suppressions and forget spent budget counters, expired sessions' sign-outs and old events,
all in bounded batches."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import anyio
import anyio.lowlevel

from notifier.config import CodeSettings, RetentionSettings
from notifier.storage.connection import Pool
from notifier.storage.queries import sql

log = logging.getLogger(__name__)

# Advisory lock key for maintenance, so workers on many machines take turns.
MAINTENANCE_LOCK_KEY = (
    int.from_bytes(hashlib.sha256(b"notifier.storage.maintenance").digest()[:8]) >> 1
)


@dataclass(frozen=True, slots=True)
class CleanupReport:
    scrubbed: int
    deleted: int
    suppressions_expired: int = 0
    counters_forgotten: int = 0
    sign_outs_forgotten: int = 0
    events_forgotten: int = 0
    skipped: bool = False  # another process held the maintenance lock


async def cleanup(
    pool: Pool,
    settings: RetentionSettings,
    budget_window: float,
    code_window: float = CodeSettings().failure_window,
) -> CleanupReport:
    """Scrub, delete, expire suppressions and forget spent budget counters, batch by batch
    until nothing is old enough; one batch at a time across every process.

    Each batch is a transaction that first takes the maintenance lock (transaction-scoped,
    so no session state outlives it and a transaction-mode pooler is fine). A process that
    finds the lock taken at the start stops: another is cleaning up. `budget_window` is the
    request limits' window (NOTIFIER_RESEND_WINDOW): counters older than it count for nothing;
    `code_window` is the codes' failure window (NOTIFIER_CODE_FAILURE_WINDOW), likewise.
    """
    batch = settings.batch
    scrubbed = await _batches(pool, "scrub_finished", settings.scrub_after, batch)
    if scrubbed is None:
        return CleanupReport(0, 0, skipped=True)
    report = CleanupReport(
        scrubbed=scrubbed,
        deleted=await _batches(pool, "delete_finished", settings.retention, batch) or 0,
        suppressions_expired=await _batches(pool, "expire_suppressions", None, batch) or 0,
        counters_forgotten=(
            await _batches(pool, "forget_request_counts", budget_window, batch) or 0
        )
        + (await _batches(pool, "forget_code_failures", code_window, batch) or 0),
        sign_outs_forgotten=await _batches(pool, "forget_session_sign_outs", None, batch) or 0,
        events_forgotten=await _batches(pool, "forget_events", settings.event_retention, batch)
        or 0,
    )
    if report.scrubbed or report.deleted or report.suppressions_expired:
        log.info(
            "cleanup: scrubbed %d addresses, deleted %d finished deliveries, expired %d "
            "suppressions",
            report.scrubbed,
            report.deleted,
            report.suppressions_expired,
        )
    return report


async def _batches(pool: Pool, statement: str, age: float | None, batch: int) -> int | None:
    """Rows done, batch by batch; None if another process held the lock at the start."""
    total = 0
    args = (batch,) if age is None else (age, batch)
    while True:
        async with pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval(sql("try_maintenance_lock"), MAINTENANCE_LOCK_KEY):
                return total or None
            done = int(await conn.fetchval(sql(statement), *args))
        total += done
        if done < batch:
            return total
        await anyio.lowlevel.checkpoint()  # let other work on this loop through between batches


async def run_periodically(
    pool: Pool, settings: RetentionSettings, budget_window: float, code_window: float
) -> None:
    """The worker's schedule: a cleanup every `settings.interval` seconds (0: never)."""
    if settings.interval <= 0:
        return
    while True:
        await anyio.sleep(settings.interval)
        try:
            await cleanup(pool, settings, budget_window, code_window)
        except Exception as exc:
            log.warning("scheduled cleanup failed (%s); retrying at the next interval", exc)
