"""Production's shape, with real parts: notifier hands mail to a Postfix relay, which
answers 250 at once; its next hop refuses one mailbox; the DSN Postfix writes comes back to
`notifier inbound` at the delivery's own return path and marks that delivery bounced and
its address suppressed, while the mail that went through stays sent."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import asyncpg
import pytest

from notifier import events
from notifier.config import SmtpSettings
from notifier.inbound.server import InboundListener, ReportIntake
from notifier.tokens import TokenKeys
from tests.support import postfix
from tests.support.deliveries import enqueue
from tests.support.recorder import recorded
from tests.support.smtp_server import Reply, SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

DOMAIN = "bounces.notifier.test"
WAIT = 40


def wait_for_port(port: int, log: Path) -> None:
    for _ in range(100):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"Postfix does not listen on {port}:\n{log.read_text()}")


async def test_a_relays_dsn_marks_the_refused_delivery_bounced_and_suppresses_it(
    db: asyncpg.Connection,
    pool: asyncpg.Pool,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    free_tcp_port_factory: Callable[[], int],
) -> None:
    postfix.require()
    smtp_server.plan(
        "gone@example.org", Reply("rcpt", "550 5.1.1 <gone@example.org>: user unknown")
    )
    listener = InboundListener(
        ReportIntake(pool, keys, DOMAIN, suppression_seconds=86400.0, rate=100.0),
        max_bytes=1024 * 1024,
        max_connections=10,
    )
    inbound_port = await listener.start("127.0.0.1", 0)
    relay_port = free_tcp_port_factory()
    try:
        with postfix.running_postfix(relay_port, smtp_server.port, DOMAIN, inbound_port) as log:
            await anyio.to_thread.run_sync(wait_for_port, relay_port, log)
            relay = SmtpSettings(host="127.0.0.1", port=relay_port, tls="none")
            async with running_worker(database_url, keys, relay) as worker:
                worker.bounce_domain = DOMAIN
                ok = await enqueue(db, keys, "ok@example.org")
                gone = await enqueue(db, keys, "gone@example.org")
                statuses: dict[int, str] = {}
                with anyio.move_on_after(WAIT):
                    await recorded(worker).wait_for(lambda s: len(s.of(events.Completed)) >= 2)
                    while statuses.get(gone.outbox_id) != "bounced":
                        await anyio.sleep(0.2)
                        rows = await db.fetch("SELECT id, status FROM notifier.email_outbox")
                        statuses = {r["id"]: r["status"] for r in rows}
                assert statuses.get(gone.outbox_id) == "bounced", log.read_text()[-3000:]
            assert log.exists()
    finally:
        await listener.stop()
    assert statuses == {ok.outbox_id: "sent", gone.outbox_id: "bounced"}
    suppressed = [
        r["email"] for r in await db.fetch("SELECT email FROM notifier.suppressed_addresses")
    ]
    assert suppressed == ["gone@example.org"]
    report = await db.fetchrow(
        "SELECT kind, bounce_type, status, source FROM notifier.delivery_reports"
    )
    assert tuple(report) == ("bounced", "permanent", "5.1.1", "dsn")
    # The relay accepted both: the worker recorded both as sent before the report came.
    assert [m.recipients for m in smtp_server.kept] == [["ok@example.org"]]
