"""The real processes behind Debian's PgBouncer, started by the test: the API's and workers'
pools in transaction mode with LISTEN direct; the one-shot commands through it; and a
LISTEN pointed at transaction mode by mistake, reported plainly in the worker's log."""

from __future__ import annotations

import json
import secrets
from collections import Counter
from collections.abc import Callable

import anyio
import asyncpg
import pytest

from tests.support.cli import run_cli, running_cli
from tests.support.smtp_server import SmtpServer
from tests.support.topologies import PooledDatabase
from tests.support.traffic import (
    WORKER_READY,
    Traffic,
    client_key,
    running_service,
    service_env,
    wait_until,
)

pytestmark = pytest.mark.anyio

WAIT = 30.0
RATE = 40.0
REQUESTS = 40


async def test_pgbouncer_transaction_pools_with_direct_listen_deliver_everything(
    pooled: PooledDatabase, smtp_server: SmtpServer, free_tcp_port_factory: Callable[[], int]
) -> None:
    port = free_tcp_port_factory()
    env = service_env(
        pooled.transaction,
        smtp_server,
        port,
        NOTIFIER_STATEMENT_CACHE_SIZE="0",
        NOTIFIER_LISTEN_DATABASE_URL=pooled.direct,
        NOTIFIER_SWEEP_INTERVAL="60",  # slow: deliveries must come from notifications
    )
    key = await client_key(pooled.direct)
    traffic = Traffic(f"http://127.0.0.1:{port}", key, RATE, secrets.token_hex(4))
    db = await asyncpg.connect(pooled.direct)
    try:
        async with running_service(env, [env, env]) as service:
            async with anyio.create_task_group() as tg:
                tg.start_soon(traffic.run)

                async def answered() -> bool:
                    return len(traffic.answers) >= REQUESTS

                await wait_until(answered, WAIT, f"{REQUESTS} answers")
                traffic.stop()

            async def delivered() -> bool:
                sent = await db.fetchval(
                    "SELECT count(*) FROM notifier.email_outbox WHERE status = 'sent'"
                )
                return bool(sent == len(traffic.accepted) == len(traffic.answers))

            await wait_until(delivered, WAIT, "every accepted verification sent")
            codes = await service.stop()
        found = await db.fetch(
            "SELECT discovered_by::text AS how, count(*) AS n FROM notifier.email_outbox GROUP BY 1"
        )
    finally:
        await db.close()
    assert Counter(a.status for a in traffic.answers) == Counter({202: len(traffic.answers)})
    assert {r["how"]: r["n"] for r in found}.get("notify", 0) > 0  # LISTEN heard them
    assert len({m.message_id for m in smtp_server.kept}) == len(traffic.accepted)
    assert codes == [0, 0, 0]
    worker_logs = [line for w in service.workers for line in w.lines]
    assert not [line for line in worker_logs if "LISTEN connection lost" in line]
    # The pools really went through PgBouncer: it carried transactions for this database.
    [stats] = [s for s in pooled.bouncers.transaction.show("STATS") if s["database"] == pooled.name]
    assert int(stats["total_xact_count"]) > REQUESTS


async def test_pgbouncer_transaction_mode_serves_stats_cleanup_and_suppressions(
    pooled: PooledDatabase,
) -> None:
    env = {"NOTIFIER_DATABASE_URL": pooled.transaction}
    stats = await run_cli("stats", "--json", env=env)
    cleanup = await run_cli("cleanup", env=env)
    suppressions = await run_cli("suppressions", "list", env=env)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)
    assert cleanup.returncode == 0, cleanup.stderr
    assert suppressions.returncode == 0, suppressions.stderr


async def test_pgbouncer_transaction_mode_listen_is_reported_in_the_log_within_the_check_interval(
    pooled: PooledDatabase, smtp_server: SmtpServer, free_tcp_port_factory: Callable[[], int]
) -> None:
    interval, timeout = 5.0, 2.0
    env = service_env(
        pooled.transaction,  # and no NOTIFIER_LISTEN_DATABASE_URL: the mistake
        smtp_server,
        free_tcp_port_factory(),
        NOTIFIER_STATEMENT_CACHE_SIZE="0",
        NOTIFIER_LISTENER_CHECK_INTERVAL=f"{interval:g}",
        NOTIFIER_LISTENER_CHECK_TIMEOUT=f"{timeout:g}",
    )
    async with running_cli("worker", env=env) as worker:
        with anyio.fail_after(WAIT):
            await worker.wait_for_line(WORKER_READY)
        with anyio.fail_after(interval + timeout):
            line = await worker.wait_for_line("LISTEN connection lost")
    message = json.loads(line)["msg"]
    assert "it hears nothing" in message
    assert "transaction or statement mode" in message
    assert "NOTIFIER_LISTEN_DATABASE_URL" in message
