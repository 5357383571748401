"""Fixtures for the topology tests: PostgreSQL behind PgBouncer, of the test session's own.

The components come from the machine's Debian packages (.ci/run installs them). Where they
are missing the tests are skipped, unless NOTIFIER_TEST_REQUIRE_TOPOLOGIES is set (CI sets
it): then they fail, so a machine like CI's can never skip them silently.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import anyio
import pytest

from tests.support import harness
from tests.support.databases import create_database, create_template, drop_database
from tests.support.topology import PgBouncer, PostgresServer, TopologyUnavailable, topology

REQUIRE = harness.REQUIRE_TOPOLOGIES


def unavailable(exc: TopologyUnavailable) -> None:
    """Skip (a developer's machine without the packages) or fail (CI)."""
    if harness.value(REQUIRE):
        pytest.fail(f"{exc} ({REQUIRE} is set)")
    pytest.skip(str(exc))


@dataclass(frozen=True, slots=True)
class PooledServer:
    """A PostgreSQL server with one PgBouncer in transaction mode and one in session mode."""

    server: PostgresServer
    transaction: PgBouncer
    session: PgBouncer
    template: str


@dataclass(frozen=True, slots=True)
class PooledDatabase:
    """One test's database, reachable directly and through either PgBouncer."""

    name: str
    direct: str
    transaction: str
    session: str
    bouncers: PooledServer


@pytest.fixture(scope="session")
def pooled_server() -> Iterator[PooledServer]:
    try:
        with topology() as owned:
            # pg_stat_statements: tests read how statements ran (with JIT or not).
            server = owned.single(settings={"shared_preload_libraries": "pg_stat_statements"})
            transaction = owned.pgbouncer(server.port, "transaction")
            session = owned.pgbouncer(server.port, "session")
            template = anyio.run(create_template, server.url(), backend="asyncio")
            yield PooledServer(server, transaction, session, template)
    except TopologyUnavailable as exc:
        unavailable(exc)


@pytest.fixture
async def pooled(pooled_server: PooledServer) -> AsyncIterator[PooledDatabase]:
    """A fresh migrated database on the pooled server, dropped after the test."""
    admin_url = pooled_server.server.url()
    name = await create_database(admin_url, pooled_server.template)
    try:
        yield PooledDatabase(
            name=name,
            direct=pooled_server.server.url(name),
            transaction=pooled_server.transaction.url(name),
            session=pooled_server.session.url(name),
            bouncers=pooled_server,
        )
    finally:
        await drop_database(admin_url, name)
