"""What the benchmark reads back from the outbox: progress of a drain, and claim times.

Times come out as integer microseconds since the epoch (exact, unlike a float of seconds),
on the database clock, which is the machine's wall clock the producer and the sink read.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any

import anyio

# How often a wait for deliveries asks the database, seconds. The wait only decides when a
# phase moves on; drain times come from completed_at.
POLL_SECONDS = 0.1

COUNT_SENT = "SELECT count(*) FROM notifier.email_outbox WHERE status = 'sent'"
# Rows still to finish. Each count is served by a partial index (pending rows, sending rows),
# so it costs what is left, not the whole table: the monitor must not compete with the
# workers it measures.
COUNT_UNFINISHED = """
SELECT (SELECT count(*) FROM notifier.email_outbox WHERE status = 'pending')
     + (SELECT count(*) FROM notifier.email_outbox WHERE status = 'sending')
"""
ROWS_OF = """
SELECT verification_id, id, status, discovered_by::text AS discovered_by, attempts,
       (extract(epoch FROM claimed_at) * 1000000)::bigint AS claimed_us,
       (extract(epoch FROM completed_at) * 1000000)::bigint AS completed_us
FROM notifier.email_outbox
WHERE verification_id = ANY($1::uuid[])
"""
DRAIN_SPAN = """
SELECT count(*) FILTER (WHERE status = 'sent') AS sent,
       count(*) AS total,
       (extract(epoch FROM min(claimed_at)) * 1000000)::bigint AS first_claim_us,
       (extract(epoch FROM max(completed_at)) * 1000000)::bigint AS last_completion_us,
       (extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY completed_at))
        * 1000000)::bigint AS half_completion_us,
       (extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY completed_at))
        * 1000000)::bigint AS p99_completion_us,
       sum(attempts) AS attempts
FROM notifier.email_outbox
"""
DISCOVERY = """
SELECT discovered_by::text AS discovered_by, count(*) AS count
FROM notifier.email_outbox GROUP BY 1 ORDER BY 2 DESC
"""
OUTBOX_IDS = "SELECT id, verification_id FROM notifier.email_outbox"
OUTBOX_KEYS = "SELECT id, message_id, verification_id FROM notifier.email_outbox"


@dataclass(frozen=True, slots=True)
class RowTimes:
    outbox_id: int
    status: str
    discovered_by: str | None
    attempts: int
    claimed_us: int | None
    completed_us: int | None


async def wait_until_done(conn: Any, within: float) -> int:
    """Wait until no row is pending or sending (for at most `within` seconds); how many
    rows are sent."""
    for _ in range(math.ceil(within / POLL_SECONDS)):
        if int(await conn.fetchval(COUNT_UNFINISHED)) == 0:
            break
        await anyio.sleep(POLL_SECONDS)
    return int(await conn.fetchval(COUNT_SENT))


async def row_times(conn: Any, verification_ids: list[uuid.UUID]) -> dict[uuid.UUID, RowTimes]:
    rows = await conn.fetch(ROWS_OF, verification_ids)
    return {
        r["verification_id"]: RowTimes(
            r["id"],
            r["status"],
            r["discovered_by"],
            r["attempts"],
            r["claimed_us"],
            r["completed_us"],
        )
        for r in rows
    }


async def outbox_ids(conn: Any) -> dict[int, uuid.UUID]:
    return {r["id"]: r["verification_id"] for r in await conn.fetch(OUTBOX_IDS)}


async def outbox_keys(conn: Any) -> list[tuple[int, str, uuid.UUID]]:
    """Every row's (id, Message-ID, verification id)."""
    return [(r["id"], r["message_id"], r["verification_id"]) for r in await conn.fetch(OUTBOX_KEYS)]


async def discovery_counts(conn: Any) -> dict[str, int]:
    return {str(r["discovered_by"]): int(r["count"]) for r in await conn.fetch(DISCOVERY)}


@dataclass(frozen=True, slots=True)
class DrainSpan:
    sent: int
    total: int
    first_claim_us: int | None
    last_completion_us: int | None
    half_completion_us: int | None
    p99_completion_us: int | None
    attempts: int


async def drain_span(conn: Any) -> DrainSpan:
    r = await conn.fetchrow(DRAIN_SPAN)
    return DrainSpan(
        int(r["sent"]),
        int(r["total"]),
        r["first_claim_us"],
        r["last_completion_us"],
        r["half_completion_us"],
        r["p99_completion_us"],
        int(r["attempts"] or 0),
    )
