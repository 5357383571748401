"""Where the soak's PostgreSQL runs, and its one database fault.

- single: notifier's embedded server in the run directory, listening on a Unix socket in its
  own directory only, restarted once (pg_ctl restart -m fast).
- failover: Debian's PostgreSQL, a primary and a synchronous streaming replica built with
  pg_basebackup; the product reaches them through one multi-host URL with
  target_session_attrs=read-write; the primary is killed (pg_ctl stop -m immediate) and,
  after a detection pause, the replica promoted.
- pgbouncer: one Debian PostgreSQL behind PgBouncer: the pools go through a transaction-mode
  PgBouncer (statement cache off), LISTEN and migrations through a session-mode one; the
  server behind them is restarted once.

The servers and PgBouncer come from tests/support/topology.py (started as an unprivileged
user, on free ports of 127.0.0.1): the machine's own PostgreSQL is never touched.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, Protocol

import anyio

from notifier.storage.embedded import SERVER_LOG, EmbeddedPostgres
from tests.support.topology import ReplicatedPostgres, Topology, topology

TopologyName = Literal["single", "failover", "pgbouncer"]
TOPOLOGIES: tuple[TopologyName, ...] = ("single", "failover", "pgbouncer")
DATABASE = "soak"
# Seconds between the primary's death and the promotion: a failover manager's detection
# (Patroni's default TTL is 30 s; shortened so the run stays short).
DETECTION_SECONDS = 2.0
# The embedded server's settings: durability buys nothing in a throwaway cluster; enough
# connections for every process (three workers' pools and listeners, the API's pool, the
# soak's own).
EMBEDDED_SETTINGS = {
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
    "max_connections": "200",
}


class SoakDatabase(Protocol):
    """The run's database: what the product is told, what the soak reads, the one fault."""

    # Settings the product's processes get (NOTIFIER_DATABASE_URL and its companions).
    env: dict[str, str]
    # Where the soak's own probes connect (they follow a failover).
    probe_url: str
    # "pg_restart" or "pg_failover": the kind of the one database fault.
    fault_kind: str
    # Server and pooler logs, for the token check.
    log_paths: list[Path]

    async def fault(self) -> tuple[float, float]:
        """Inject the fault; when it began and when the database accepted writes again."""
        ...


class SingleDatabase:
    """The embedded server, restarted once (pg_ctl restart -m fast) at the same URL."""

    fault_kind = "pg_restart"

    def __init__(self, server: EmbeddedPostgres) -> None:
        self._server = server
        self.probe_url = server.url
        self.env = {"NOTIFIER_DATABASE_URL": server.url}
        self.log_paths = [server.data_dir / SERVER_LOG]

    async def fault(self) -> tuple[float, float]:
        began = time.time()
        await anyio.to_thread.run_sync(self._server.restart)
        return began, time.time()


class FailoverDatabase:
    """A primary and a synchronous replica; the fault is a failover."""

    fault_kind = "pg_failover"

    def __init__(self, cluster: ReplicatedPostgres) -> None:
        self._cluster = cluster
        url = cluster.url(DATABASE)
        self.probe_url = url
        self.env = {"NOTIFIER_DATABASE_URL": url}
        self.log_paths = [cluster.primary.log_path, cluster.replica.log_path]

    async def fault(self) -> tuple[float, float]:
        failover = await anyio.to_thread.run_sync(self._cluster.failover, DETECTION_SECONDS)
        return failover.died_at, failover.promoted_at


class BouncedDatabase:
    """One server behind PgBouncer in transaction mode (pools) and session mode (LISTEN)."""

    fault_kind = "pg_restart"

    def __init__(self, owned: Topology) -> None:
        self._server = owned.single((DATABASE,))
        transaction = owned.pgbouncer(self._server.port, "transaction")
        session = owned.pgbouncer(self._server.port, "session")
        self.probe_url = self._server.url(DATABASE)
        self.env = {
            "NOTIFIER_DATABASE_URL": transaction.url(DATABASE),
            "NOTIFIER_STATEMENT_CACHE_SIZE": "0",
            "NOTIFIER_LISTEN_DATABASE_URL": session.url(DATABASE),
        }
        self.log_paths = [self._server.log_path, transaction.log_path, session.log_path]

    async def fault(self) -> tuple[float, float]:
        began = time.time()
        await anyio.to_thread.run_sync(self._server.restart)
        return began, time.time()


@contextlib.contextmanager
def soak_database(name: TopologyName, run_dir: Path) -> Iterator[SoakDatabase]:
    """The run's database in topology `name`, started; stopped when the block ends."""
    if name == "single":
        server = EmbeddedPostgres(run_dir / "pg", EMBEDDED_SETTINGS)
        with server:
            yield SingleDatabase(server)
        return
    # Kept in the run directory: the servers' logs are part of the run's evidence.
    with topology(keep=True, parent=run_dir) as owned:
        if name == "failover":
            yield FailoverDatabase(owned.replicated((DATABASE,)))
        else:
            yield BouncedDatabase(owned)
