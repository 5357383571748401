"""The PostgreSQL a run measures: a throwaway cluster of its own, or NOTIFIER_DATABASE_URL's.

Its own cluster comes from the machine's PostgreSQL binaries (with pg_stat_statements
preloaded, so every statement the workers issue is counted), or from the embedded pgserver
build when there are none. It listens on a Unix socket in its own directory only, keeps the
durability defaults (fsync, synchronous_commit on: commit costs are part of what is
measured), and is stopped and deleted when the run ends.

Each run works in a database of its own on that server, migrated with the product's own
migrations, and the workers log in as a role of their own, so their statements can be told
from the producer's. Both are dropped at the end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

from benchmarks import procstat
from notifier import migrations

log = logging.getLogger(__name__)

# Where Debian puts each major version's binaries; the newest one present is used.
DEBIAN_BINARIES = Path("/usr/lib/postgresql")
# PostgreSQL refuses to run as root; as root, the cluster runs as this system user (the
# one notifier's embedded server uses).
SERVER_USER = "pgserver"
# The port only names the socket file; the cluster opens no TCP port.
PORT = 54329
PG_CTL_TIMEOUT_SECONDS = 60
CONNECT_TIMEOUT_SECONDS = 10.0
# A sun_path holds 108 bytes and the server appends "/.s.PGSQL.<port>" to the directory.
SOCKET_DIR_MAX_LENGTH = 90
# Settings of the run's own cluster. Durability stays at its defaults on purpose.
CLUSTER_SETTINGS = {
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


def with_database(url: str, name: str, user: str | None = None) -> str:
    """The same server URL with another database and, if given, another user."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{quote(user)}@{host}"
    return urlunsplit(parts._replace(netloc=netloc, path="/" + name))


def _debian_bin_dir() -> Path | None:
    if not DEBIAN_BINARIES.is_dir():
        return None
    versions = [p for p in DEBIAN_BINARIES.iterdir() if p.name.isdigit()]
    for version in sorted(versions, key=lambda p: int(p.name), reverse=True):
        if (version / "bin" / "postgres").exists():
            return version / "bin"
    return None


def _pgserver_bin_dir() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver._commands import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH)


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


class OwnCluster:
    """Owns a throwaway cluster in a temporary directory from start() to stop()."""

    def __init__(self, bin_dir: Path, statements: bool) -> None:
        self.bin_dir = bin_dir
        self.statements = statements
        self.settings = dict(CLUSTER_SETTINGS)
        if statements:
            self.settings.update(STATEMENT_SETTINGS)
        self.root = Path(tempfile.mkdtemp(prefix="notifier-bench-pg-"))
        self.pgdata = self.root / "pgdata"
        self.socket_dir = self.root / "run"
        self.log_file = self.root / "server.log"
        self._run_as: str | None = None
        self._started = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@/postgres?host={quote(str(self.socket_dir))}&port={PORT}"

    def start(self) -> None:
        if len(str(self.socket_dir)) > SOCKET_DIR_MAX_LENGTH:
            raise RuntimeError(f"socket directory path too long: {self.socket_dir}")
        # Its trust authentication is safe only because no other user can reach the socket:
        # the directory is the server user's alone (root's clients pass anyway).
        self.socket_dir.mkdir(mode=0o700)
        self.pgdata.mkdir()
        self.log_file.touch()
        if os.geteuid() == 0:
            self._prepare_user()
        self._run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
            ]
        )
        options = [f"-k {self.socket_dir}", "-c listen_addresses=''", f"-p {PORT}"]
        options += [f"-c {key}={value}" for key, value in self.settings.items()]
        self._pg_ctl(["-w", "-l", str(self.log_file), "-o", " ".join(options), "start"])
        self._started = True

    def stop(self) -> None:
        try:
            if self._started:
                self._pg_ctl(["-m", "immediate", "-w", "stop"])
        finally:
            self._started = False
            shutil.rmtree(self.root, ignore_errors=True)

    def _prepare_user(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pgserver.utils import ensure_prefix_permissions, ensure_user_exists
        entry = ensure_user_exists(SERVER_USER)
        if entry is None:
            raise RuntimeError(f"could not create the system user {SERVER_USER!r}")
        ensure_prefix_permissions(self.pgdata)
        ensure_prefix_permissions(self.bin_dir / "postgres")
        for path in (self.pgdata, self.log_file, self.socket_dir):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        self.pgdata.chmod(0o700)
        self._run_as = SERVER_USER

    def _pg_ctl(self, args: list[str]) -> None:
        self._run(
            [
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.pgdata),
                "-t",
                str(PG_CTL_TIMEOUT_SECONDS),
                *args,
            ]
        )

    def _run(self, argv: list[str]) -> None:
        kwargs: dict[str, Any] = {"user": self._run_as} if self._run_as else {}
        # A file, not a pipe: the server inherits the descriptors and would hold a pipe open.
        with tempfile.TemporaryFile("w+") as output:
            result = subprocess.run(
                argv, stdout=output, stderr=subprocess.STDOUT, text=True, check=False, **kwargs
            )
            if result.returncode != 0:
                output.seek(0)
                tail = self.log_file.read_text(errors="replace").splitlines()[-15:]
                raise RuntimeError(
                    f"{' '.join(argv[:1])} failed:\n{output.read()}\n" + "\n".join(tail)
                )


@contextlib.contextmanager
def own_cluster() -> Iterator[OwnCluster]:
    bin_dir = _debian_bin_dir() or _pgserver_bin_dir()
    cluster = OwnCluster(bin_dir, _has_pg_stat_statements(bin_dir))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


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
        yield await _describe(cluster.url, "own cluster", cluster.bin_dir)


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
         notifier.verifications
"""


async def empty_tables(conn: Any) -> None:
    await conn.execute(TRUNCATE)
