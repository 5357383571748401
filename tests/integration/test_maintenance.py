"""Retention: finished deliveries lose their addresses, then their rows, in bounded batches."""

from __future__ import annotations

import asyncpg
import pytest

from notifier.config import RetentionSettings
from notifier.storage.maintenance import MAINTENANCE_LOCK_KEY, cleanup
from notifier.tokens import TokenKeys
from tests.support.deliveries import enqueue

pytestmark = pytest.mark.anyio

DAY = 86400.0
SETTINGS = RetentionSettings(scrub_after=7 * DAY, retention=30 * DAY, batch=2)


WINDOW = 3600.0


async def finished(db: asyncpg.Connection, keys: TokenKeys, email: str, days_ago: float) -> int:
    """A delivery that finished `days_ago` days ago, its link expired as long."""
    enqueued = await enqueue(db, keys, email)
    await db.execute(
        """UPDATE notifier.email_outbox SET status = 'sent', attempts = 1,
                  completed_at = now() - make_interval(secs => $2)
           WHERE id = $1""",
        enqueued.outbox_id,
        days_ago * DAY,
    )
    await db.execute(
        "UPDATE notifier.verifications SET expires_at = now() - make_interval(secs => $2)"
        " WHERE id = $1",
        enqueued.id,
        days_ago * DAY,
    )
    return enqueued.outbox_id


async def emails(db: asyncpg.Connection) -> set[str]:
    return {r["email"] for r in await db.fetch("SELECT email FROM notifier.verifications")}


async def test_cleanup_scrubs_then_deletes_by_age_in_batches(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys
) -> None:
    for n in range(3):
        await finished(db, keys, f"old{n}@example.com", days_ago=40)
    for n in range(3):
        await finished(db, keys, f"mid{n}@example.com", days_ago=10)
    await finished(db, keys, "new@example.com", days_ago=1)
    await enqueue(db, keys, "pending@example.com")
    report = await cleanup(pool, SETTINGS, WINDOW)
    assert (report.scrubbed, report.deleted) == (6, 3)  # the 40-day-old were scrubbed, then gone
    assert await emails(db) == {
        "m***@example.com",
        "new@example.com",
        "pending@example.com",
    }
    attempts_left = await db.fetchval("SELECT count(*) FROM notifier.email_outbox")
    assert attempts_left == 5


async def test_cleanup_leaves_suppressions_of_deleted_deliveries_in_place(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys
) -> None:
    outbox_id = await finished(db, keys, "gone@example.com", days_ago=40)
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason, outbox_id) VALUES ($1, 'x', $2)",
        "gone@example.com",
        outbox_id,
    )
    await cleanup(pool, SETTINGS, WINDOW)
    row = await db.fetchrow("SELECT email, outbox_id FROM notifier.suppressed_addresses")
    assert (row["email"], row["outbox_id"]) == ("gone@example.com", None)


async def test_only_one_cleanup_runs_at_a_time(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys
) -> None:
    await finished(db, keys, "old@example.com", days_ago=40)
    await db.execute("SELECT pg_advisory_lock($1)", MAINTENANCE_LOCK_KEY)
    try:
        report = await cleanup(pool, SETTINGS, WINDOW)
    finally:
        await db.execute("SELECT pg_advisory_unlock($1)", MAINTENANCE_LOCK_KEY)
    assert report.skipped and await emails(db) == {"old@example.com"}
