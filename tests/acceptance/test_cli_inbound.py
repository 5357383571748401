"""`notifier inbound` as a real process: it takes a bounce for a delivery's return path and
stops cleanly; without a bounce domain it refuses to start."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import aiosmtplib
import anyio
import asyncpg
import pytest

from notifier import verp
from notifier.tokens import TokenKeys
from tests.conftest import TEST_SECRET
from tests.support.cli import run_cli, running_cli
from tests.support.deliveries import enqueue
from tests.support.reports import dsn

pytestmark = pytest.mark.anyio

WAIT = 20
DOMAIN = "bounces.example.com"


async def test_inbound_takes_a_bounce_and_stops_on_sigterm(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    free_tcp_port_factory: Callable[[], int],
) -> None:
    port = free_tcp_port_factory()
    row = await enqueue(db, keys, "ada@example.org")
    await db.execute(
        "UPDATE notifier.email_outbox SET status = 'sent', last_outcome = 'sent', attempts = 1, "
        "completed_at = now() WHERE id = $1",
        row.outbox_id,
    )
    env = {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
        "NOTIFIER_BOUNCE_DOMAIN": DOMAIN,
        "NOTIFIER_INBOUND_PORT": str(port),
    }
    async with running_cli("inbound", env=env) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line("taking reports for")
        async with aiosmtplib.SMTP(hostname="127.0.0.1", port=port) as smtp:
            to = verp.return_path(keys, row.outbox_id, DOMAIN)
            await smtp.sendmail("MAILER-DAEMON@relay.example.net", [to], dsn(to, "ada@example.org"))
        os.kill(cli.pid, signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await cli.process.wait() == 0
    status = await db.fetchval(
        "SELECT status FROM notifier.email_outbox WHERE id = $1", row.outbox_id
    )
    assert status == "bounced"


async def test_inbound_without_a_bounce_domain_says_what_to_set() -> None:
    result = await run_cli("inbound", env={"NOTIFIER_TOKEN_SECRET": TEST_SECRET})
    assert result.returncode != 0 and "NOTIFIER_BOUNCE_DOMAIN" in result.stderr
