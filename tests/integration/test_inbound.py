"""`notifier inbound`: reports mailed over real SMTP to a delivery's return path mark it
bounced, suppress whom they should, write their events once, and a forged one changes
nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiosmtplib
import anyio
import asyncpg
import httpx
import pytest

from notifier import events, verp
from notifier.inbound.server import InboundListener, ReportIntake
from notifier.runner import internal_app
from notifier.tokens import TokenKeys
from notifier.web.listeners import Services
from tests.support.apps import INTERNAL_BASE, bearer, make_key
from tests.support.deliveries import Enqueued, enqueue, policy_for_tests
from tests.support.recorder import recorded
from tests.support.reports import arf, dsn
from tests.support.smtp_server import SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

DOMAIN = "bounces.example.com"
ADDRESS = "ada@example.org"
DAY = 86400.0


@pytest.fixture
async def inbound(pool: asyncpg.Pool, keys: TokenKeys) -> AsyncIterator[InboundListener]:
    listener = InboundListener(
        ReportIntake(pool, keys, DOMAIN, suppression_seconds=30 * DAY, rate=1000.0),
        max_bytes=1024 * 1024,
        max_connections=5,
    )
    await listener.start("127.0.0.1", 0)
    try:
        yield listener
    finally:
        await listener.stop()


async def sent(db: asyncpg.Connection, keys: TokenKeys, address: str = ADDRESS) -> Enqueued:
    """A delivery the relay accepted (250), as the worker would have settled it."""
    row = await enqueue(db, keys, address)
    await db.execute(
        "UPDATE notifier.email_outbox SET status = 'sent', last_outcome = 'sent', "
        "attempts = 1, completed_at = now() WHERE id = $1",
        row.outbox_id,
    )
    return row


async def mail(listener: InboundListener, to: str, raw: bytes) -> None:
    assert listener.port is not None
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=listener.port) as smtp:
        await smtp.sendmail("MAILER-DAEMON@relay.example.net", [to], raw)


async def state(db: asyncpg.Connection, row: Enqueued) -> tuple[str, list[str], list[str]]:
    status = await db.fetchval(
        "SELECT status FROM notifier.email_outbox WHERE id = $1", row.outbox_id
    )
    suppressed = [
        r["email"] for r in await db.fetch("SELECT email FROM notifier.suppressed_addresses")
    ]
    kinds = [
        r["type"]
        for r in await db.fetch(
            "SELECT type FROM notifier.events WHERE verification_id = $1 AND type NOT IN "
            "('verification.created', 'verification.sent') ORDER BY id",
            row.id,
        )
    ]
    return status, suppressed, kinds


async def test_a_permanent_bounce_marks_the_delivery_bounced_and_suppresses_the_address(
    db: asyncpg.Connection, keys: TokenKeys, inbound: InboundListener
) -> None:
    row = await sent(db, keys)
    await mail(inbound, verp.return_path(keys, row.outbox_id, DOMAIN), dsn("x", ADDRESS))
    status, suppressed, kinds = await state(db, row)
    assert (status, suppressed) == ("bounced", [ADDRESS])
    assert sorted(kinds) == ["email.bounced", "email.suppressed", "verification.failed"]
    reason = await db.fetchval(
        "SELECT data->>'reason' FROM notifier.events WHERE type = 'verification.failed'"
    )
    assert reason == "bounced"


async def test_the_same_report_twice_changes_nothing_twice(
    db: asyncpg.Connection, keys: TokenKeys, inbound: InboundListener
) -> None:
    row = await sent(db, keys)
    raw = dsn("x", ADDRESS, message_id="<once@relay.example.net>")
    to = verp.return_path(keys, row.outbox_id, DOMAIN)
    await mail(inbound, to, raw)
    await mail(inbound, to, raw)
    _, _, kinds = await state(db, row)
    assert kinds.count("email.bounced") == 1
    assert await db.fetchval("SELECT count(*) FROM notifier.delivery_reports") == 1
    assert inbound.handler.applied == {"suppressed": 1, "duplicate": 1}


@pytest.mark.parametrize(
    "forge",
    [
        lambda keys, outbox_id: f"bounce+{outbox_id}.0000000000000000@{DOMAIN}",  # bad MAC
        lambda keys, outbox_id: verp.return_path(keys, outbox_id, "elsewhere.example.com"),
        lambda keys, outbox_id: f"postmaster@{DOMAIN}",
    ],
)
async def test_a_forged_report_is_refused_at_rcpt_and_changes_nothing(
    db: asyncpg.Connection, keys: TokenKeys, inbound: InboundListener, forge: object
) -> None:
    row = await sent(db, keys)
    with pytest.raises(aiosmtplib.SMTPRecipientsRefused):
        await mail(inbound, forge(keys, row.outbox_id), dsn("x", ADDRESS))  # type: ignore[operator]
    assert await state(db, row) == ("sent", [], [])
    assert await db.fetchval("SELECT count(*) FROM notifier.delivery_reports") == 0


async def test_a_report_under_another_secret_names_no_delivery(
    db: asyncpg.Connection, keys: TokenKeys, inbound: InboundListener
) -> None:
    row = await sent(db, keys)
    forged = verp.return_path(TokenKeys(("f" * 40,)), row.outbox_id, DOMAIN)
    with pytest.raises(aiosmtplib.SMTPRecipientsRefused):
        await mail(inbound, forged, dsn("x", ADDRESS))
    assert (await state(db, row))[0] == "sent"


async def test_a_report_for_a_delivery_that_is_gone_changes_nothing(
    db: asyncpg.Connection, keys: TokenKeys, inbound: InboundListener
) -> None:
    await mail(inbound, verp.return_path(keys, 99_999, DOMAIN), dsn("x", ADDRESS))
    assert inbound.handler.applied == {"unknown": 1}
    assert await db.fetchval("SELECT count(*) FROM notifier.suppressed_addresses") == 0


async def test_a_policy_bounce_marks_it_bounced_and_suppresses_nobody(
    db: asyncpg.Connection, keys: TokenKeys, inbound: InboundListener
) -> None:
    row = await sent(db, keys)
    raw = dsn("x", ADDRESS, status="5.7.1", diagnostic="smtp; 550 5.7.1 rejected by policy")
    await mail(inbound, verp.return_path(keys, row.outbox_id, DOMAIN), raw)
    status, suppressed, _ = await state(db, row)
    assert (status, suppressed) == ("bounced", [])


async def test_a_transient_bounce_is_counted_and_changes_nothing_else(
    db: asyncpg.Connection, keys: TokenKeys, inbound: InboundListener
) -> None:
    row = await sent(db, keys)
    raw = dsn("x", ADDRESS, action="delayed", status="4.4.1")
    await mail(inbound, verp.return_path(keys, row.outbox_id, DOMAIN), raw)
    assert await state(db, row) == ("sent", [], [])
    assert await db.fetchval("SELECT kind FROM notifier.delivery_reports") == "deferred"


async def test_a_complaint_suppresses_the_address_until_it_is_cleared(
    db: asyncpg.Connection, keys: TokenKeys, inbound: InboundListener
) -> None:
    row = await sent(db, keys)
    await mail(inbound, verp.return_path(keys, row.outbox_id, DOMAIN), arf("x", ADDRESS))
    status, suppressed, kinds = await state(db, row)
    assert (status, suppressed) == ("sent", [ADDRESS])
    assert "email.complained" in kinds
    assert await db.fetchval("SELECT expires_at FROM notifier.suppressed_addresses") is None


async def test_one_report_takes_one_recipient(
    db: asyncpg.Connection, keys: TokenKeys, inbound: InboundListener
) -> None:
    first, second = await sent(db, keys), await sent(db, keys, "bob@example.org")
    recipients = [verp.return_path(keys, r.outbox_id, DOMAIN) for r in (first, second)]
    assert inbound.port is not None
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=inbound.port) as smtp:
        refused, _ = await smtp.sendmail("MAILER-DAEMON@x", recipients, dsn("x", ADDRESS))
    assert list(refused) == [recipients[1]]


async def test_past_its_connections_the_listener_says_come_back_later(
    inbound: InboundListener,
) -> None:
    assert inbound.port is not None
    held = []
    try:
        for _ in range(inbound.max_connections):
            smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=inbound.port)
            await smtp.connect()
            held.append(smtp)
        with pytest.raises(aiosmtplib.SMTPConnectResponseError) as refused:
            await aiosmtplib.SMTP(hostname="127.0.0.1", port=inbound.port).connect()
        assert refused.value.code == 421
    finally:
        for smtp in held:
            smtp.close()


async def test_the_worker_sends_with_the_deliverys_own_return_path(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        worker.bounce_domain = DOMAIN
        row = await enqueue(db, keys, ADDRESS)
        with anyio.fail_after(10):
            await recorded(worker).wait_for(lambda s: len(s.of(events.Completed)) >= 1)
    [received] = smtp_server.received
    assert received.sender == verp.return_path(keys, row.outbox_id, DOMAIN)
    assert verp.outbox_of(keys, received.sender, DOMAIN) == row.outbox_id


async def test_the_consoles_delivery_page_shows_its_reports(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys, inbound: InboundListener
) -> None:
    row = await sent(db, keys)
    await mail(inbound, verp.return_path(keys, row.outbox_id, DOMAIN), dsn("x", ADDRESS))
    app = internal_app(Services.over(pool, policy_for_tests(keys)))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as console:
        key = await make_key(db, ["read"])
        page = (await console.get(f"/console/deliveries/{row.id}", headers=bearer(key))).text
    assert "<h2 id=reports>Reports" in page and "<code>5.1.1</code>" in page
    assert "permanent" in page and ADDRESS not in page
