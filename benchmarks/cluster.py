"""The PostgreSQL a run measures: a throwaway cluster of its own, or NOTIFIER_DATABASE_URL's.

Its own cluster is a server of tests/support/topology.py run from the machine's PostgreSQL
binaries (with pg_stat_statements preloaded, so every statement the workers issue is
counted), or from the embedded pgserver build when there are none. It listens on a Unix
socket in its own directory only, keeps the durability defaults (fsync, synchronous_commit
on: commit costs are part of what is measured), and is stopped and deleted when the run
ends.

Each run works in a database of its own on that server, migrated with the product's own
migrations, and the workers log in as a role of their own, so their statements can be told
from the producer's. Both are dropped at the end.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from benchmarks import procstat
from notifier.storage import migrations
from notifier.storage.embedded import pg_bin
from tests.support.databases import with_database
from tests.support.topology import PostgresServer, TopologyUnavailable, postgres_bin_dir, topology

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 10.0
# Settings of the run's own cluster, over the test servers' (tests/support/topology.py):
# durability back at PostgreSQL's defaults on purpose, since commit costs are measured.
CLUSTER_SETTINGS = {
    "fsync": "on",
    "full_page_writes": "on",
    "max_connections": "200",
    "shared_buffers": "256MB",
    # Checkpoints in the middle of a measurement would be noise; the run is short.
    "max_wal_size": "4GB",
    "checkpoint_timeout": "30min",
    # Autovacuum on tables truncated between phases only adds noise.
    "autovacuum": "off",
    "log_min_messages": "warning",
}
STATEMENT_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    # Top-level statements only: one entry per statement a client sent, not per statement
    # a SQL function ran inside it.
    "pg_stat_statements.track": "top",
    "pg_stat_statements.max": "10000",
    "pg_stat_statements.track_utility": "on",
}
# The workers' own login role, so pg_stat_statements can attribute statements to them.
WORKER_ROLE_PREFIX = "notifier_bench_worker"


@dataclass(frozen=True, slots=True)
class Server:
    """A PostgreSQL server a run may create databases on."""

    admin_url: str  # a superuser's URL to some existing database
    kind: str  # "own cluster" or "NOTIFIER_DATABASE_URL"
    bin_dir: Path | None  # where pgbench lives, if known
    version: str
    # Whether pg_stat_statements is loaded (else statements are inferred from transactions).
    statements: bool
    # The postmaster's pid when the server runs on this machine and /proc shows it.
    postmaster_pid: int | None
    transport: str  # "unix socket" or "tcp"
    settings: dict[str, str]


@dataclass(frozen=True, slots=True)
class BenchDatabase:
    """The run's database on the server, and the URLs for the roles that use it."""

    server: Server
    name: str
    admin_url: str  # superuser, this database: the producer and the monitor
    worker_url: str  # the workers' login
    worker_role: str  # the role worker statements are attributed to


def _bin_dir() -> Path:
    """Debian's newest PostgreSQL, else the embedded pgserver build."""
    try:
        return postgres_bin_dir()
    except TopologyUnavailable:
        return pg_bin()


def _has_pg_stat_statements(bin_dir: Path) -> bool:
    try:
        libdir = subprocess.run(
            [str(bin_dir / "pg_config"), "--pkglibdir"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return False
    return (Path(libdir) / "pg_stat_statements.so").exists()


@contextlib.contextmanager
def own_cluster() -> Iterator[PostgresServer]:
    """A throwaway server on a Unix socket only, for as long as the block runs."""
    bin_dir = _bin_dir()
    settings = dict(CLUSTER_SETTINGS)
    if _has_pg_stat_statements(bin_dir):
        settings.update(STATEMENT_SETTINGS)
    with topology(bin_dir=bin_dir) as owned:
        yield owned.single(settings=settings, tcp=False)


async def _describe(admin_url: str, kind: str, bin_dir: Path | None) -> Server:
    conn = await asyncpg.connect(admin_url, timeout=CONNECT_TIMEOUT_SECONDS)
    try:
        version = await conn.fetchval("SHOW server_version")
        preload = await conn.fetchval("SHOW shared_preload_libraries")
        backend = await conn.fetchval("SELECT pg_backend_pid()")
        settings = {
            row["name"]: row["setting"]
            for row in await conn.fetch(
                "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])",
                [
                    "fsync",
                    "synchronous_commit",
                    "wal_sync_method",
                    "shared_buffers",
                    "max_connections",
                    "wal_writer_delay",
                    "commit_delay",
                ],
            )
        }
        unix = await conn.fetchval("SELECT inet_client_addr() IS NULL")
        # Our own backend's parent is the postmaster, if this server runs here (asked while
        # the backend lives: it exits when the connection closes).
        postmaster = procstat.parent_of(backend)
    finally:
        await conn.close()
    if postmaster is not None and procstat.cpu_seconds(postmaster) is None:
        postmaster = None
    if bin_dir is None:
        found = shutil.which("pgbench")
        bin_dir = Path(found).parent if found else None
    return Server(
        admin_url=admin_url,
        kind=kind,
        bin_dir=bin_dir,
        version=version,
        statements="pg_stat_statements" in re.split(r"\s*,\s*", preload),
        postmaster_pid=postmaster,
        transport="unix socket" if unix else "tcp",
        settings=settings,
    )


@contextlib.asynccontextmanager
async def open_server(url: str | None) -> AsyncIterator[Server]:
    """The server to measure: `url`'s, or a cluster of the run's own for as long as it runs."""
    if url is not None:
        yield await _describe(url, "NOTIFIER_DATABASE_URL", None)
        return
    with own_cluster() as cluster:
        yield await _describe(cluster.url(), "own cluster", cluster.bin_dir)


@contextlib.asynccontextmanager
async def bench_database(server: Server) -> AsyncIterator[BenchDatabase]:
    """A migrated database and a worker role of the run's own, dropped afterwards."""
    suffix = secrets.token_hex(4)
    name = f"notifier_bench_{suffix}"
    role = f"{WORKER_ROLE_PREFIX}_{suffix}"
    admin = await asyncpg.connect(server.admin_url, timeout=CONNECT_TIMEOUT_SECONDS)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        # A superuser role: the workers need nothing less than the schema's owner would have,
        # and the run's database is thrown away afterwards.
        await admin.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
    finally:
        await admin.close()
    admin_url = with_database(server.admin_url, name)
    try:
        conn = await asyncpg.connect(admin_url, timeout=CONNECT_TIMEOUT_SECONDS)
        try:
            await migrations.migrate(conn)
            if server.statements:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        finally:
            await conn.close()
        worker_url = with_database(server.admin_url, name, user=role)
        try:
            probe = await asyncpg.connect(worker_url, timeout=CONNECT_TIMEOUT_SECONDS)
            await probe.close()
        except Exception as exc:  # e.g. password authentication for a role with none
            log.warning("workers log in as the admin user (%s); statements are approximate", exc)
            worker_url, role = admin_url, urlsplit(server.admin_url).username or "postgres"
        yield BenchDatabase(server, name, admin_url, worker_url, role)
    finally:
        admin = await asyncpg.connect(server.admin_url, timeout=CONNECT_TIMEOUT_SECONDS)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.execute(f'DROP ROLE IF EXISTS "{WORKER_ROLE_PREFIX}_{suffix}"')
        finally:
            await admin.close()


# Every table the product writes, emptied between phases so each starts from the same state.
TRUNCATE = """
TRUNCATE notifier.delivery_attempts, notifier.suppressed_addresses, notifier.email_outbox,
         notifier.verifications, notifier.events, notifier.webhook_deliveries,
         notifier.webhook_attempts, notifier.delivery_reports, notifier.request_counts,
         notifier.send_rate
"""


async def empty_tables(conn: Any) -> None:
    await conn.execute(TRUNCATE)
