"""`notifier stats` as an alert probe, and `notifier cleanup` as a cron job."""

from __future__ import annotations

import asyncpg
import orjson
import pytest

from notifier.storage.database import describe
from notifier.tokens import TokenKeys
from tests.support.cli import log_records, run_cli
from tests.support.deliveries import enqueue

pytestmark = pytest.mark.anyio


async def test_stats_on_a_healthy_queue_exits_zero_with_every_figure(
    database_url: str, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    await enqueue(db, keys)
    result = await run_cli("stats", "--json", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 0, result.stderr
    body = orjson.loads(result.stdout)
    assert body["queue"]["pending"] == 1
    assert isinstance(body["queue"]["pending"], int)  # a count, printed as one
    assert set(body["queue"]) >= {
        "pending",
        "sending",
        "expired_leases",
        "oldest_pending_seconds",
        "notification_queue_usage",
    }
    assert body["alerts"] == []


async def test_stats_exits_nonzero_when_the_oldest_pending_row_waited_too_long(
    database_url: str, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys)
    await db.execute(
        "UPDATE notifier.email_outbox SET next_attempt_at = now() - interval '10 minutes' "
        "WHERE id = $1",
        enqueued.outbox_id,
    )
    env = {"NOTIFIER_DATABASE_URL": database_url, "NOTIFIER_ALERT_OLDEST_PENDING": "60"}
    table = await run_cli("stats", env=env)
    assert table.returncode == 1
    assert "Queue now" in table.stdout and "ALERT" in table.stdout
    assert "oldest pending row has waited" in table.stdout


async def test_stats_alerts_on_expired_leases(
    database_url: str, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys)
    await db.execute(
        """UPDATE notifier.email_outbox SET status = 'sending', lease_owner = 'gone:1/w',
                  lease_token = gen_random_uuid(), lease_until = now() - interval '1 minute'
           WHERE id = $1""",
        enqueued.outbox_id,
    )
    env = {"NOTIFIER_DATABASE_URL": database_url, "NOTIFIER_ALERT_EXPIRED_LEASES": "0"}
    result = await run_cli("stats", "--json", env=env)
    assert result.returncode == 1
    assert "expired leases" in orjson.loads(result.stdout)["alerts"][0]


async def test_stats_prints_no_log_line_by_default(database_url: str) -> None:
    result = await run_cli("stats", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 0, result.stderr
    assert "Queue now" in result.stdout
    assert log_records(result.stdout, result.stderr) == []


async def test_stats_with_verbose_logs_which_database_it_uses(database_url: str) -> None:
    result = await run_cli("-v", "stats", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 0, result.stderr
    logged = [r["msg"] for r in log_records(result.stderr) if r["level"] == "info"]
    assert logged == [f"using the database at {describe(database_url)}"]


async def test_cleanup_reports_what_it_did(database_url: str) -> None:
    result = await run_cli("cleanup", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "scrubbed 0 addresses, deleted 0 finished deliveries, expired 0 suppressions, "
        "forgot 0 events"
    )
