"""Behind PgBouncer (Debian's, started by the test): what the pool runs works in transaction
mode, LISTEN works through a session-mode pool, and a LISTEN mistakenly sent through a
transaction-mode pool is caught by its round trip."""

from __future__ import annotations

import uuid
from collections import Counter

import anyio
import asyncpg
import pytest

from notifier import events
from notifier.config import RetentionSettings
from notifier.storage.database import connect, create_pool
from notifier.storage.maintenance import cleanup
from notifier.storage.queries import sql
from notifier.tokens import TokenKeys
from tests.support.deliveries import enqueue, enqueue_many
from tests.support.recorder import recorded
from tests.support.smtp_server import SmtpServer
from tests.support.topologies import PooledDatabase
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 20
# Enough statements at once that PgBouncer hands one client's statements to several servers.
CONCURRENT_STATEMENTS = 200
POOL_CONNECTIONS = 4


async def failures_under_concurrency(url: str, statement_cache_size: int) -> Counter[str]:
    pool = await create_pool(
        url, max_size=POOL_CONNECTIONS, statement_cache_size=statement_cache_size
    )
    failures: Counter[str] = Counter()

    async def statement(i: int) -> None:
        try:
            await pool.fetchval("SELECT $1::int + 1", i)
            await pool.fetchval("SELECT $1::text || '!'", str(i))
        except asyncpg.PostgresError as exc:
            failures[type(exc).__name__] += 1

    try:
        async with anyio.create_task_group() as tg:
            for i in range(CONCURRENT_STATEMENTS):
                tg.start_soon(statement, i)
    finally:
        await pool.close()
    return failures


async def test_pgbouncer_transaction_mode_needs_the_statement_cache_off(
    pooled: PooledDatabase,
) -> None:
    # The reason NOTIFIER_STATEMENT_CACHE_SIZE=0 exists: PgBouncer before 1.21 does not carry
    # a prepared statement from one server connection to the next.
    cached = await failures_under_concurrency(pooled.transaction, statement_cache_size=100)
    uncached = await failures_under_concurrency(pooled.transaction, statement_cache_size=0)
    assert cached and set(cached) <= {
        "InvalidSQLStatementNameError",
        "DuplicatePreparedStatementError",
    }, cached
    assert uncached == Counter()


async def test_pgbouncer_transaction_mode_pool_learns_types_with_jit_off(
    pooled: PooledDatabase,
) -> None:
    # asyncpg's catalogue query for a new array type, run with JIT on, takes a second or
    # more; through a transaction pooler its own "jit off" lands on another server.
    db = await connect(pooled.direct)
    try:
        await db.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await db.execute("SELECT pg_stat_statements_reset()")
        pool = await create_pool(
            pooled.transaction, max_size=POOL_CONNECTIONS, statement_cache_size=0
        )
        try:
            async with anyio.create_task_group() as tg:
                for i in range(CONCURRENT_STATEMENTS):
                    tg.start_soon(pool.fetch, sql("check_sendable"), [i], [uuid.uuid4()])
        finally:
            await pool.close()
        row = await db.fetchrow(
            """SELECT sum(calls) AS calls, sum(jit_functions) AS jitted
               FROM pg_stat_statements WHERE query LIKE '%typeinfo_tree%'"""
        )
    finally:
        await db.close()
    assert row["calls"] > 0  # the types were learnt...
    assert row["jitted"] == 0  # ...without JIT


async def test_pgbouncer_transaction_mode_carries_requests_claims_and_completions(
    pooled: PooledDatabase, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(
        pooled.direct,
        keys,
        smtp_server.settings(),
        pool_url=pooled.transaction,
        statement_cache_size=0,
    ) as worker:
        # Requests written the way the API writes them, through the transaction pooler.
        writer = await connect(pooled.transaction, statement_cache_size=0)
        try:
            await enqueue_many(writer, keys, 30)
        finally:
            await writer.close()
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Completed, 30)
    assert len({r.message_id for r in smtp_server.received}) == 30
    claims = Counter(e.discovered_by for e in recorded(worker).of(events.Claimed))
    assert claims["notify"] > 0  # LISTEN went direct and heard them
    assert recorded(worker).of(events.ListenerLost) == []


async def test_pgbouncer_transaction_mode_cleanup_leaves_no_lock_behind(
    pooled: PooledDatabase, keys: TokenKeys
) -> None:
    db = await connect(pooled.direct)
    try:
        for n in range(5):
            enqueued = await enqueue(db, keys, f"old{n}@example.com")
            await db.execute(
                """UPDATE notifier.email_outbox SET status = 'sent', attempts = 1,
                          completed_at = now() - interval '40 days' WHERE id = $1""",
                enqueued.outbox_id,
            )
        pool = await create_pool(pooled.transaction, statement_cache_size=0)
        try:
            settings = RetentionSettings(scrub_after=86400.0, retention=30 * 86400.0, batch=2)
            first = await cleanup(pool, settings, 3600.0)
            second = await cleanup(pool, settings, 3600.0)
        finally:
            await pool.close()
        held = await db.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
    finally:
        await db.close()
    assert (first.deleted, first.skipped) == (5, False)
    assert (second.deleted, second.skipped) == (0, False)  # the first left no lock behind
    assert held == 0


async def test_pgbouncer_session_mode_carries_listen(
    pooled: PooledDatabase, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(
        pooled.session,
        keys,
        smtp_server.settings(),
        pool_url=pooled.transaction,
        statement_cache_size=0,
    ) as worker:
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.ListenerChecked)
        db = await connect(pooled.direct)
        try:
            await enqueue_many(db, keys, 10)
        finally:
            await db.close()
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Completed, 10)
    claims = Counter(e.discovered_by for e in recorded(worker).of(events.Claimed))
    assert claims == Counter(notify=10)
    assert recorded(worker).of(events.ListenerLost) == []


async def test_pgbouncer_transaction_mode_listen_is_caught_by_the_round_trip(
    pooled: PooledDatabase, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(
        pooled.transaction,  # the mistake: LISTEN through a transaction-mode pooler
        keys,
        smtp_server.settings(),
        pool_url=pooled.transaction,
        statement_cache_size=0,
        sweep_interval=0.5,
    ) as worker:
        with anyio.fail_after(WAIT):
            [lost, *_] = await recorded(worker).wait_for_kind(events.ListenerLost)
        db = await connect(pooled.direct)
        try:
            await enqueue_many(db, keys, 5)
        finally:
            await db.close()
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Completed, 5)  # the sweep still delivers
    assert lost.heard is False
    assert "it hears nothing" in lost.reason
    assert "NOTIFIER_LISTEN_DATABASE_URL" in lost.reason
    assert recorded(worker).of(events.ListenerChecked) == []
