"""PostgreSQL servers of their own for tests, the soak and the benchmarks: a primary with a
synchronous streaming replica built by pg_basebackup, PgBouncer in front, or one plain
server, all from the machine's Debian packages.

Everything runs as an unprivileged system user (PostgreSQL and PgBouncer refuse root), in a
private temporary directory, on free TCP ports of 127.0.0.1 and a private socket directory
(or that directory alone): the machine's own PostgreSQL (port 5432) is never touched.
Everything is stopped and deleted when the owner closes it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from notifier.storage.embedded import SERVER_USER
from tests.support.ports import free_port

# Where Debian puts each major version's binaries; the newest one with pg_basebackup is used.
DEBIAN_BINARIES = Path("/usr/lib/postgresql")
# Debian's pgbouncer package installs it here (not on root's PATH on every image).
PGBOUNCER_CANDIDATES = (Path("/usr/sbin/pgbouncer"), Path("/usr/bin/pgbouncer"))
# Seconds pg_ctl may take to start, stop or promote a server.
PG_CTL_TIMEOUT_SECONDS = 60
# A sun_path holds 108 bytes and the server appends "/.s.PGSQL.<port>" to the directory.
SOCKET_DIR_MAX_LENGTH = 90
# Seconds a server, a replica or PgBouncer may take to become usable.
READY_TIMEOUT_SECONDS = 30.0
READY_POLL_SECONDS = 0.05
# The user every client logs in as (trust authentication on loopback only).
USER = "postgres"
REPLICA_NAME = "replica"

# Durability against a crash of the machine buys nothing in a throwaway cluster (the data
# survives a killed server in the page cache either way); synchronous replication stays on,
# so a commit the primary acknowledged is on the replica.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "hot_standby": "on",
    "log_min_messages": "warning",
    # So a test that reads the log can see which connection did what.
    "log_line_prefix": "%m [%p] %a ",
}

PoolMode = Literal["session", "transaction", "statement"]


class TopologyUnavailable(RuntimeError):
    """The machine lacks a component (PostgreSQL server binaries, pg_basebackup, pgbouncer)."""


def postgres_bin_dir() -> Path:
    """The newest Debian PostgreSQL server's bin directory that has pg_basebackup."""
    if DEBIAN_BINARIES.is_dir():
        versions = [p for p in DEBIAN_BINARIES.iterdir() if p.name.isdigit()]
        for version in sorted(versions, key=lambda p: int(p.name), reverse=True):
            bin_dir = version / "bin"
            if (bin_dir / "postgres").exists() and (bin_dir / "pg_basebackup").exists():
                return bin_dir
    raise TopologyUnavailable(
        f"no PostgreSQL server binaries under {DEBIAN_BINARIES} "
        "(install Debian's postgresql package; .ci/run does)"
    )


def pgbouncer_path() -> Path:
    found = shutil.which("pgbouncer")
    for candidate in (Path(found) if found else None, *PGBOUNCER_CANDIDATES):
        if candidate is not None and candidate.exists():
            return candidate
    raise TopologyUnavailable("pgbouncer is not installed (Debian's pgbouncer package; .ci/run)")


def tcp_url(port: int, database: str, host: str = "127.0.0.1") -> str:
    return f"postgresql://{USER}@{host}:{port}/{database}"


class _Runner:
    """Runs commands as the unprivileged server user when this process is root."""

    def __init__(self, root: Path) -> None:
        self.user: str | None = None
        self.uid = self.gid = -1
        if os.geteuid() == 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # platformdirs, through pgserver
                from pgserver.utils import ensure_user_exists
            entry = ensure_user_exists(SERVER_USER)
            if entry is None:
                raise TopologyUnavailable(f"could not create the system user {SERVER_USER!r}")
            self.user, self.uid, self.gid = SERVER_USER, entry.pw_uid, entry.pw_gid
        self.reach(root)
        self.give(root)

    def reach(self, path: Path) -> None:
        """Let the server user traverse every directory above `path`."""
        if self.user is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from pgserver.utils import ensure_prefix_permissions
            ensure_prefix_permissions(path)

    def give(self, path: Path) -> None:
        """Hand a file or directory we created to the server user."""
        if self.user is not None:
            os.chown(path, self.uid, self.gid)

    def run(self, argv: list[str], what: str, log: Path | None = None) -> None:
        kwargs: dict[str, Any] = {"user": self.user} if self.user else {}
        # A file, not a pipe: a server started by pg_ctl inherits the descriptors and would
        # hold a pipe open for as long as it runs.
        with tempfile.TemporaryFile("w+") as output:
            done = subprocess.run(
                argv, stdout=output, stderr=subprocess.STDOUT, text=True, check=False, **kwargs
            )
            if done.returncode != 0:
                output.seek(0)
                detail = output.read().strip()
                if log is not None and log.exists():
                    tail = log.read_text(errors="replace").splitlines()[-15:]
                    detail += "\n--- log ---\n" + "\n".join(tail)
                raise RuntimeError(f"{what} failed:\n{detail}")

    def popen(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        kwargs: dict[str, Any] = {"user": self.user} if self.user else {}
        with log.open("ab") as out:
            return subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, **kwargs
            )


class PostgresServer:
    """One PostgreSQL server (a primary, or a replica until promoted) in its own directory.

    It listens on a free port of 127.0.0.1 and in its socket directory, or with `tcp`
    False in that directory alone, which then only the server's user (and root) may enter:
    trust authentication is safe there.
    """

    def __init__(
        self, name: str, root: Path, runner: _Runner, bin_dir: Path, tcp: bool = True
    ) -> None:
        self.name = name
        self.dir = root / name
        self.pgdata = self.dir / "pgdata"
        self.socket_dir = self.dir / "run"
        self.log_path = self.dir / "server.log"
        self.port = free_port()
        self.tcp = tcp
        self.bin_dir = bin_dir
        self._runner = runner
        self.running = False
        if len(str(self.socket_dir)) > SOCKET_DIR_MAX_LENGTH:
            raise RuntimeError(f"socket directory path too long: {self.socket_dir}")
        for path in (self.dir, self.socket_dir):
            path.mkdir()
            runner.give(path)
        if not tcp:
            self.socket_dir.chmod(0o700)
        self.log_path.touch()
        runner.give(self.log_path)

    def url(self, database: str = "postgres") -> str:
        if self.tcp:
            return tcp_url(self.port, database)
        host = quote(str(self.socket_dir))
        return f"postgresql://{USER}@/{database}?host={host}&port={self.port}"

    def initdb(self) -> None:
        self.pgdata.mkdir(mode=0o700)
        self._runner.give(self.pgdata)
        self._runner.run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
            ],
            f"initdb of {self.name}",
        )

    def clone_from(self, primary: PostgresServer) -> None:
        """A streaming replica of `primary`: pg_basebackup -R (standby.signal, conninfo)."""
        self.pgdata.mkdir(mode=0o700)
        self._runner.give(self.pgdata)
        self._runner.run(
            [
                str(self.bin_dir / "pg_basebackup"),
                "-D",
                str(self.pgdata),
                "-d",
                f"host=127.0.0.1 port={primary.port} user={USER} application_name={self.name}",
                "-X",
                "stream",
                "-R",
                "-c",
                "fast",
            ],
            f"pg_basebackup for {self.name}",
        )

    def start(self, settings: Mapping[str, str] | None = None) -> None:
        """Start it with SERVER_SETTINGS (plus `settings`) given on the command line, so a
        replica cloned from it inherits none of them."""
        options = [f"-p {self.port}", f"-k {self.socket_dir}"]
        merged = {**SERVER_SETTINGS, **({} if self.tcp else {"listen_addresses": ""})}
        merged.update(settings or {})
        # pg_ctl hands the options to a shell: quote every value.
        options += [f"-c {key}={shlex.quote(value)}" for key, value in merged.items()]
        self._pg_ctl(["-w", "-l", str(self.log_path), "-o", " ".join(options), "start"])
        self.running = True

    def kill(self) -> None:
        """The hard way: `pg_ctl stop -m immediate` (every process quits, no checkpoint)."""
        self._pg_ctl(["-m", "immediate", "-w", "stop"])
        self.running = False

    def stop(self) -> None:
        if self.running:
            self._pg_ctl(["-m", "immediate", "-w", "stop"])
            self.running = False

    def promote(self) -> None:
        """Make a replica a primary; returns once it accepts writes."""
        self._pg_ctl(["-w", "promote"])

    def restart(self) -> None:
        self._pg_ctl(["-m", "fast", "-w", "-l", str(self.log_path), "restart"])

    def _pg_ctl(self, args: list[str]) -> None:
        self._runner.run(
            [
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.pgdata),
                "-t",
                str(PG_CTL_TIMEOUT_SECONDS),
                *args,
            ],
            f"pg_ctl {args[-1]} of {self.name}",
            self.log_path,
        )


def _psql(
    runner: _Runner, bin_dir: Path, url: str, sql: str, what: str, header: str | None = None
) -> str:
    """One statement through psql (simple protocol), returning its unaligned output: rows
    only, or with a header line when `header` names the field separator."""
    kwargs: dict[str, Any] = {"user": runner.user} if runner.user else {}
    shape = ["-t"] if header is None else ["-F", header, "-P", "footer=off"]
    done = subprocess.run(
        [str(bin_dir / "psql"), "-X", "-A", *shape, "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr.strip()}")
    return str(done.stdout).strip()


@dataclass(frozen=True, slots=True)
class Failover:
    """When a failover happened (time.time()): the primary was killed, the promotion was
    asked for, and pg_ctl saw it done."""

    died_at: float
    promoting_at: float
    promoted_at: float


class ReplicatedPostgres:
    """A primary and a synchronous streaming replica, from start() until close().

    `failover()` kills the primary hard and promotes the replica, as Patroni or a managed
    service would; `url()` is the multi-host URL that finds whichever is writable.
    """

    def __init__(self, root: Path, runner: _Runner, bin_dir: Path) -> None:
        self._runner = runner
        self._bin = bin_dir
        self.primary = PostgresServer("primary", root, runner, bin_dir)
        self.replica = PostgresServer(REPLICA_NAME, root, runner, bin_dir)
        self.failovers: list[Failover] = []

    def start(self, databases: tuple[str, ...] = ()) -> None:
        self.primary.initdb()
        self.primary.start()
        for name in databases:
            self.psql(self.primary.url(), f'CREATE DATABASE "{name}"')
        self.replica.clone_from(self.primary)
        self.replica.start()
        self._wait_streaming()
        # Synchronous from here on: a commit returns only once the replica has flushed it.
        self.psql(
            self.primary.url(),
            f"ALTER SYSTEM SET synchronous_standby_names = '\"{REPLICA_NAME}\"'",
        )
        self.psql(self.primary.url(), "SELECT pg_reload_conf()")
        self._wait_streaming(sync=True)

    def url(self, database: str) -> str:
        """Both servers, primary first; clients connect to whichever accepts writes."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.replica.port}"
        return f"postgresql://{USER}@{hosts}/{database}?target_session_attrs=read-write"

    def failover(self, detection_seconds: float = 0.0) -> Failover:
        """Kill the primary (pg_ctl stop -m immediate); after `detection_seconds` (what a
        failover manager takes to notice and decide), promote the replica."""
        died_at = time.time()  # conservative: the gap measured includes the kill itself
        self.primary.kill()
        time.sleep(detection_seconds)
        promoting_at = time.time()
        self.replica.promote()
        failover = Failover(died_at, promoting_at, time.time())
        self.failovers.append(failover)
        return failover

    def psql(self, url: str, sql: str) -> str:
        return _psql(self._runner, self._bin, url, sql, sql)

    def _wait_streaming(self, sync: bool = False) -> None:
        state = "sync" if sync else "async"
        query = (
            "SELECT count(*) FROM pg_stat_replication "
            f"WHERE application_name = '{REPLICA_NAME}' AND state = 'streaming' "
            f"AND sync_state = '{state}'"
        )
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while self.psql(self.primary.url(), query) != "1":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica was not streaming ({state}) in time")
            time.sleep(READY_POLL_SECONDS)

    def close(self) -> None:
        for server in (self.replica, self.primary):
            with contextlib.suppress(Exception):
                server.stop()


class PgBouncer:
    """A PgBouncer process in one pool mode, in front of the server on `server_port`, from
    start() until close(). Any database name a client asks for is pooled to that server's
    database of the same name.

    `show()` asks its admin console.
    """

    def __init__(
        self, root: Path, runner: _Runner, bin_dir: Path, server_port: int, pool_mode: PoolMode
    ) -> None:
        self.pool_mode = pool_mode
        self.dir = root / f"pgbouncer-{pool_mode}"
        self.dir.mkdir()
        runner.give(self.dir)
        self.port = free_port()
        self.server_port = server_port
        self.ini = self.dir / "pgbouncer.ini"
        self.log_path = self.dir / "pgbouncer.log"
        self._runner = runner
        self._bin = bin_dir
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        return tcp_url(self.port, database)

    def start(self) -> None:
        self._write_config()
        self.log_path.touch()
        self._runner.give(self.log_path)
        self._process = self._runner.popen([str(pgbouncer_path()), str(self.ini)], self.log_path)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            if self._process.poll() is not None or time.monotonic() > deadline:
                log = self.log_path.read_text(errors="replace")
                raise RuntimeError(f"pgbouncer did not start:\n{log[-2000:]}")
            time.sleep(READY_POLL_SECONDS)

    def show(self, what: str) -> list[dict[str, str]]:
        """`SHOW <what>` on the admin console, as a list of rows."""
        out = _psql(self._runner, self._bin, self.url("pgbouncer"), f"SHOW {what}", what, "|")
        lines = out.splitlines()
        if not lines:
            return []
        header = lines[0].split("|")
        return [dict(zip(header, line.split("|"), strict=False)) for line in lines[1:]]

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    def _write_config(self) -> None:
        users = self.dir / "userlist.txt"
        users.write_text(f'"{USER}" ""\n')
        self._runner.give(users)
        # Output goes to stdout, which start() sends to the log file.
        self.ini.write_text(
            f"""[databases]
* = host=127.0.0.1 port={self.server_port}

[pgbouncer]
pool_mode = {self.pool_mode}
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir = {self.dir}
auth_type = trust
auth_file = {users}
admin_users = {USER}
max_client_conn = 1000
default_pool_size = 20
server_login_retry = 1
pidfile = {self.dir / "pgbouncer.pid"}
"""
        )
        self._runner.give(self.ini)


class Topology:
    """Owns the private directory and whatever was started in it, until close().

    The servers run Debian's binaries unless `bin_dir` names others (e.g. pgserver's).
    """

    def __init__(
        self, keep: bool = False, parent: Path | None = None, bin_dir: Path | None = None
    ) -> None:
        self.bin_dir = bin_dir or postgres_bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="notifier-topology-", dir=parent))
        self.root.chmod(0o755)
        self._runner = _Runner(self.root)
        # Binaries inside a private directory (a virtualenv's pgserver, as CI makes one)
        # must be reachable for the server's user too.
        self._runner.reach(self.bin_dir / "postgres")
        self._keep = keep
        self._closers: list[Any] = []

    def replicated(self, databases: tuple[str, ...] = ()) -> ReplicatedPostgres:
        cluster = ReplicatedPostgres(self.root, self._runner, self.bin_dir)
        self._closers.append(cluster)
        cluster.start(databases)
        return cluster

    def single(
        self,
        databases: tuple[str, ...] = (),
        settings: Mapping[str, str] | None = None,
        tcp: bool = True,
    ) -> PostgresServer:
        """One server started with `settings` over SERVER_SETTINGS (see PostgresServer for
        `tcp`), with `databases` created."""
        server = PostgresServer("primary", self.root, self._runner, self.bin_dir, tcp)
        self._closers.append(server)
        server.initdb()
        server.start(settings)
        for name in databases:
            self.psql(server.url(), f'CREATE DATABASE "{name}"')
        return server

    def pgbouncer(self, server_port: int, pool_mode: PoolMode) -> PgBouncer:
        bouncer = PgBouncer(self.root, self._runner, self.bin_dir, server_port, pool_mode)
        self._closers.append(bouncer)
        bouncer.start()
        return bouncer

    def psql(self, url: str, sql: str) -> str:
        return _psql(self._runner, self.bin_dir, url, sql, sql)

    def close(self) -> None:
        for closer in reversed(self._closers):
            with contextlib.suppress(Exception):
                closer.stop() if isinstance(closer, PostgresServer) else closer.close()
        if not self._keep:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def topology(
    keep: bool = False, parent: Path | None = None, bin_dir: Path | None = None
) -> Iterator[Topology]:
    """A Topology in a new directory (under `parent`, default the system's temporary one),
    closed on exit: servers stopped, directory deleted unless `keep`."""
    owned = Topology(keep, parent, bin_dir)
    try:
        yield owned
    finally:
        owned.close()
