"""Bugs the soak (`pytest -m slow tests/soak`) found, each pinned by a test that fails until
the product is fixed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import asyncpg
import httpx
import pytest

from notifier.delivery.leases import Held, Leases
from notifier.runner import internal_app
from notifier.storage.database import create_pool
from notifier.tokens import TokenKeys
from notifier.web.listeners import Services
from tests.conftest import TEST_SECRET
from tests.support.apps import bearer, make_key
from tests.support.cli import run_cli
from tests.support.deliveries import attempts_of, enqueue, policy_for_tests

pytestmark = pytest.mark.anyio

# The failure is a race between the server closing the connection and the next request on
# it (about half of all tries lose it), so the test tries often enough never to miss it.
ROUNDS = 30


async def test_request_on_a_pooled_connection_the_server_just_closed_is_503_not_500(
    database_url: str, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    """A database restart (or failover, or an idle-connection killer) closes the API's pooled
    connections. The next request on one must get 503 with Retry-After, as any other
    "database unavailable" does, not an unhandled 500: asyncpg reports a connection the
    server just closed either as ConnectionDoesNotExistError (mapped to 503) or, about half
    the time, as InternalClientError("cannot switch to state 15; another operation (2) is in
    progress"), which the API does not map. Found by the soak's PostgreSQL restart."""
    pool = await create_pool(database_url, max_size=1)  # one connection: we know which to kill
    try:
        app = internal_app(Services.over(pool, policy_for_tests(keys)))
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        statuses: Counter[int] = Counter()
        key = await make_key(db)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api.test", headers=bearer(key)
        ) as client:
            for i in range(ROUNDS):
                async with pool.acquire() as conn:
                    pid = await conn.fetchval("SELECT pg_backend_pid()")
                await db.execute("SELECT pg_terminate_backend($1)", pid)
                response = await client.post(
                    "/v1/verifications",
                    json={"user_id": f"user-{i}", "email": f"u{i}@example.com"},
                    headers={"Idempotency-Key": f"key-{i}"},
                )
                statuses[response.status_code] += 1
        assert set(statuses) <= {202, 503}, statuses
    finally:
        await pool.close()


# A loopback port nothing listens on: the connection is refused at once.
UNREACHABLE_DATABASE_URL = "postgresql://postgres@127.0.0.1:1/postgres"


@pytest.mark.parametrize("command", ["worker", "api", "migrate"])
async def test_unreachable_database_at_start_is_a_clear_error_not_a_traceback(
    command: str, free_tcp_port_factory: Callable[[], int]
) -> None:
    """A process started while the database is down (the soak restarts a worker while its
    PostgreSQL restarts) must say so in one line, as every other start-up problem does
    ("notifier: error: ..."), and exit 2; today it dies with an uncaught
    ConnectionRefusedError / FileNotFoundError traceback from asyncpg and exits 1."""
    result = await run_cli(
        command,
        env={
            "NOTIFIER_DATABASE_URL": UNREACHABLE_DATABASE_URL,
            "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
            "NOTIFIER_API_PORT": str(free_tcp_port_factory()),
        },
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2
    assert "notifier: error:" in result.stderr


async def test_a_released_attempt_keeps_its_claim_time(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys
) -> None:
    """Every attempt records when its claim took the row (delivery_attempts.claimed_at), so
    a timeline, or the soak, can tell when each lease was live. A SIGTERMed worker's
    released attempt records NULL: release_leases does not write claimed_at."""
    leases = Leases(pool, "soak-regression/worker", 30.0)
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    assert row.lease_token is not None and row.claimed_at is not None
    assert await leases.release([Held(row.id, row.lease_token)]) == 1
    [attempt] = await attempts_of(db, row.id)
    assert attempt["outcome"] == "released"
    assert attempt["claimed_at"] == row.claimed_at
