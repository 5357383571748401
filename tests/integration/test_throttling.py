"""A provider that throttles: its rate refusals hand their attempts back, suppress nobody and
are retried after short waits, until everything is sent or its link would lapse first."""

from __future__ import annotations

import anyio
import asyncpg
import pytest

from notifier import events
from notifier.tokens import TokenKeys
from tests.support.deliveries import enqueue
from tests.support.recorder import recorded
from tests.support.smtp_server import Reply, SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 30
SES_RATE = Reply("rcpt", "454 4.7.0 Throttling failure: Maximum sending rate exceeded.")


async def test_a_provider_throttling_half_the_attempts_delays_mail_and_loses_none(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.set_random_faults({SES_RATE: 0.5}, seed=5)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        for n in range(20):
            await enqueue(db, keys, f"t{n}@example.com", max_attempts=2)
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(
                lambda s: sum(e.status == "sent" for e in s.of(events.Completed)) >= 20
            )
    rows = await db.fetch("SELECT status, attempts FROM notifier.email_outbox")
    assert {(r["status"], r["attempts"]) for r in rows} == {("sent", 1)}
    throttled = await db.fetchval(
        "SELECT count(*) FROM notifier.delivery_attempts WHERE outcome = 'throttled'"
    )
    assert throttled >= 10  # half the attempts at least, with max_attempts 2 spent by none
    assert await db.fetchval("SELECT count(*) FROM notifier.suppressed_addresses") == 0


async def test_a_delivery_throttled_until_its_link_would_lapse_expires_not_fails(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.set_random_faults({SES_RATE: 1.0}, seed=1)
    async with running_worker(
        database_url, keys, smtp_server.settings(), throttle_base=0.2, throttle_ceiling=0.8
    ) as worker:
        enqueued = await enqueue(db, keys, "slow@example.com", ttl_seconds=2, max_attempts=1)
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(
                lambda s: any(e.status == "expired" for e in s.of(events.Completed))
            )
    row = await db.fetchrow(
        "SELECT status, attempts, last_outcome, last_error FROM notifier.email_outbox "
        "WHERE id = $1",
        enqueued.outbox_id,
    )
    assert (row["status"], row["attempts"], row["last_outcome"]) == ("expired", 0, "throttled")
    assert row["last_error"].startswith("the link would expire before the next attempt")
    assert smtp_server.kept == []
