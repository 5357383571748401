"""`notifier worker` as a real process: crashes, clean and forced shutdowns, bad settings."""

from __future__ import annotations

import os
import signal

import anyio
import asyncpg
import pytest

from notifier import events
from notifier.tokens import TokenKeys
from tests.conftest import TEST_SECRET
from tests.support.cli import run_cli, running_cli
from tests.support.deliveries import attempts_of, enqueue, expire_lease, outbox_row
from tests.support.recorder import recorded
from tests.support.smtp_server import HoldAtRcpt, SlowData, SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 20
READY = "delivering ("


def worker_env(database_url: str, smtp_server: SmtpServer, **extra: str) -> dict[str, str]:
    return {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_SMTP_HOST": smtp_server.host,
        "NOTIFIER_SMTP_PORT": str(smtp_server.port),
        "NOTIFIER_SMTP_TLS": "none",
        "NOTIFIER_SMTP_DATA_TIMEOUT": "60",
        "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
        "NOTIFIER_MAIL_FROM": "noreply@notifier.test",
        "NOTIFIER_SHUTDOWN_GRACE": "10",
        **extra,
    }


async def test_worker_killed_mid_send_leaves_a_row_another_worker_reclaims(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("crash@example.com", SlowData(60.0))
    async with running_cli("worker", env=worker_env(database_url, smtp_server)) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line(READY)
        enqueued = await enqueue(db, keys, "crash@example.com")
        with anyio.fail_after(WAIT):
            await smtp_server.wait_for(1)  # the body is on the wire; no reply yet
        os.kill(cli.pid, signal.SIGKILL)
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"]) == ("sending", 1)  # the crash counts
    await expire_lease(db, enqueued.outbox_id)
    async with running_worker(database_url, keys, smtp_server.settings(), sweep_interval=0.1) as w:
        with anyio.fail_after(WAIT):
            await recorded(w).wait_for_kind(events.Completed)
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"], row["discovered_by"]) == ("sent", 2, "expired_lease")
    attempts = await attempts_of(db, enqueued.outbox_id)
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "lease_expired"), (2, "sent")]
    # The duplicate the crash caused carries the same Message-ID, and is explained above.
    copies = smtp_server.kept
    assert len(copies) == 2 and copies[0].message_id == copies[1].message_id


async def test_sigterm_finishes_the_send_in_flight_and_exits_cleanly(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("term@example.com", SlowData(1.0))
    async with running_cli("worker", env=worker_env(database_url, smtp_server)) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line(READY)
        enqueued = await enqueue(db, keys, "term@example.com")
        with anyio.fail_after(WAIT):
            await smtp_server.wait_for(1)
        cli.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await cli.process.wait() == 0
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["lease_token"]) == ("sent", None)
    leased = await db.fetchval(
        "SELECT count(*) FROM notifier.email_outbox WHERE status = 'sending'"
    )
    assert leased == 0


async def test_second_signal_exits_at_once_and_leaves_the_lease_to_expire(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    hold = HoldAtRcpt()
    smtp_server.plan("hold@example.com", hold)
    env = worker_env(database_url, smtp_server, NOTIFIER_SHUTDOWN_GRACE="60")
    async with running_cli("worker", env=env) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line(READY)
        enqueued = await enqueue(db, keys, "hold@example.com")
        await hold.wait_reached()
        cli.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            await cli.wait_for_line("shutting down gracefully")
        cli.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(5):  # far less than the 60 s grace
            assert await cli.process.wait() == 1
    hold.release.set()
    row = await outbox_row(db, enqueued.outbox_id)
    assert row["status"] == "sending"  # not released: the lease will expire on its own


async def test_invalid_setting_stops_the_worker_at_start_naming_it(database_url: str) -> None:
    result = await run_cli(
        "worker",
        env={
            "NOTIFIER_DATABASE_URL": database_url,
            "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
            "NOTIFIER_LEASE_SECONDS": "forever",
        },
    )
    assert result.returncode == 2
    assert "NOTIFIER_LEASE_SECONDS" in result.stderr
    assert "Traceback" not in result.stderr


async def test_missing_token_secret_stops_the_worker_at_start(database_url: str) -> None:
    result = await run_cli("worker", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 2
    assert "NOTIFIER_TOKEN_SECRET" in result.stderr


async def test_worker_refuses_a_database_that_needs_migrating(empty_database_url: str) -> None:
    result = await run_cli(
        "worker",
        env={"NOTIFIER_DATABASE_URL": empty_database_url, "NOTIFIER_TOKEN_SECRET": TEST_SECRET},
    )
    assert result.returncode == 2
    assert "notifier migrate" in result.stderr


async def test_a_worker_killed_mid_webhook_leaves_it_to_another_which_delivers_it(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    from notifier.storage import webhooks
    from tests.support.recorder import Recorder
    from tests.support.webhook_receiver import Answer, receiving
    from tests.support.workers import running_webhooks

    env = worker_env(database_url, smtp_server, NOTIFIER_WEBHOOK_ALLOW_PRIVATE="true")
    async with receiving() as receiver:
        _, secret = await webhooks.add(db, keys, receiver.url, allow_private=True)
        receiver.secrets.append(secret)
        receiver.plan(Answer(hang=True))
        async with running_cli("worker", env=env) as cli:
            with anyio.fail_after(WAIT):
                await cli.wait_for_line(READY)
            await enqueue(db, keys, "ada@example.com")
            await receiver.wait_for(1)  # the request is out; no answer comes
            os.kill(cli.pid, signal.SIGKILL)
        row = await db.fetchrow("SELECT status, attempts FROM notifier.webhook_deliveries")
        assert (row["status"], row["attempts"]) == ("sending", 1)  # the crash counts
        await db.execute(
            "UPDATE notifier.webhook_deliveries SET lease_until = now() - interval '1 second'"
        )
        recorder = Recorder()
        async with running_webhooks(database_url, keys, recorder=recorder, sweep_interval=0.1):
            with anyio.fail_after(WAIT):
                await recorder.wait_for_kind(events.WebhookAttempted)
        first, second = receiver.received
    outcomes = await db.fetch("SELECT attempt, outcome FROM notifier.webhook_attempts ORDER BY id")
    assert [(a["attempt"], a["outcome"]) for a in outcomes] == [
        (1, "lease_expired"),
        (2, "delivered"),
    ]
    row = await db.fetchrow("SELECT status, unknown_outcomes FROM notifier.webhook_deliveries")
    assert (row["status"], row["unknown_outcomes"]) == ("delivered", 1)
    # The duplicate the crash caused carries the same webhook-id, and is counted above.
    assert first.webhook_id == second.webhook_id
    assert first.verified_by == second.verified_by == [secret]
