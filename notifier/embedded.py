"""The embedded PostgreSQL: a real server from the pgserver wheel, in a directory notifier owns."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import tempfile
import warnings
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import quote

from notifier.errors import EmbeddedServerBusy, EmbeddedServerError

log = logging.getLogger(__name__)

# Seconds pg_ctl may take to start or stop the server (first start includes crash recovery).
PG_CTL_TIMEOUT_SECONDS = 60
# sun_path holds 108 bytes; the server appends "/.s.PGSQL.<port>" to the socket directory.
SOCKET_DIR_MAX_LENGTH = 90
# PostgreSQL refuses to run as root; as root, the server runs as this system user.
SERVER_USER = "pgserver"
OWNER_FILE = "owner.lock"
PGDATA_DIR = "pgdata"
SERVER_LOG = "server.log"
PORT = 5432


def _pg_bin() -> Path:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; that choice is pgserver's, not ours.
            warnings.simplefilter("ignore")
            from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        raise EmbeddedServerError(
            "NOTIFIER_DATABASE_URL is unset and the embedded PostgreSQL is not installed: "
            "install notifier[embedded] (or notifier[dev]), or set NOTIFIER_DATABASE_URL"
        ) from exc
    return Path(POSTGRES_BIN_PATH)


class EmbeddedPostgres:
    """Owns one PostgreSQL server in a data directory, for as long as it is entered.

    Entering takes an exclusive lock on the directory (a second live process is refused
    with EmbeddedServerBusy), initialises the cluster on first use, starts the server, or
    adopts one a crashed owner left running, and yields its URL. Leaving stops the server
    and releases the lock. The lock is a kernel file lock, so a crashed owner never leaves
    a stale one behind: its successor takes over and says so.
    """

    def __init__(self, data_dir: Path, server_settings: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self.pgdata = self.data_dir / PGDATA_DIR
        self.server_settings = dict(server_settings or {})
        self._owner: IO[str] | None = None
        self._run_as: str | None = SERVER_USER if os.geteuid() == 0 else None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise EmbeddedServerError("the embedded PostgreSQL is not running")
        return self._url

    def __enter__(self) -> str:
        self.start()
        return self.url

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> str:
        bin_dir = _pg_bin()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_ownership()
        try:
            self._prepare_user(bin_dir)
            if not (self.pgdata / "PG_VERSION").exists():
                self._initdb(bin_dir)
            socket_dir = self._running_socket_dir(bin_dir)
            if socket_dir is None:
                socket_dir = self._start_server(bin_dir)
            else:
                log.warning(
                    "adopting the PostgreSQL server a previous notifier process left running in %s",
                    self.pgdata,
                )
        except BaseException:
            self._release_ownership()
            raise
        self._url = f"postgresql://postgres@/postgres?host={quote(str(socket_dir))}&port={PORT}"
        return self._url

    def stop(self) -> None:
        if self._owner is None:
            return
        try:
            if self._url is not None:
                self._pg_ctl(_pg_bin(), ["-m", "fast", "-w", "stop"])
        finally:
            self._url = None
            self._release_ownership()

    def restart(self) -> None:
        """Restart the server in place (`pg_ctl restart -m fast`), for fault drills.

        Every client connection is closed, committed data survives, and the URL stays the
        same: pg_ctl reuses the options the server was started with (socket directory,
        port, settings). Returns once the server accepts connections again.
        """
        if self._owner is None or self._url is None:
            raise EmbeddedServerError("the embedded PostgreSQL is not running")
        log_file = self.data_dir / SERVER_LOG
        self._pg_ctl(_pg_bin(), ["-m", "fast", "-w", "-l", str(log_file), "restart"])

    # -- ownership -------------------------------------------------------------------------

    def _take_ownership(self) -> None:
        owner = (self.data_dir / OWNER_FILE).open("a+")
        try:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner.seek(0)
            previous = owner.read().strip()
            owner.close()
            raise EmbeddedServerBusy(
                str(self.data_dir), int(previous) if previous.isdigit() else None
            ) from None
        owner.seek(0)
        previous = owner.read().strip()
        if previous.isdigit() and int(previous) != os.getpid():
            log.info(
                "process %s owned %s and exited without releasing it; taking over",
                previous,
                self.data_dir,
            )
        owner.seek(0)
        owner.truncate()
        owner.write(str(os.getpid()))
        owner.flush()
        self._owner = owner

    def _release_ownership(self) -> None:
        if self._owner is not None:
            with contextlib.suppress(OSError):
                self._owner.seek(0)
                self._owner.truncate()
            self._owner.close()  # closing drops the flock
            self._owner = None

    # -- server ----------------------------------------------------------------------------

    def is_running(self) -> bool:
        """Whether a server runs on this data directory, whoever started it."""
        return self._running_socket_dir(_pg_bin()) is not None

    def _prepare_user(self, bin_dir: Path) -> None:
        if self._run_as is None:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pgserver.utils import ensure_prefix_permissions, ensure_user_exists
        entry = ensure_user_exists(SERVER_USER)
        if entry is None:
            raise EmbeddedServerError(f"could not create the system user {SERVER_USER!r}")
        # The server user must reach its binaries and data directory through every parent.
        self.pgdata.mkdir(exist_ok=True)
        ensure_prefix_permissions(self.pgdata)
        ensure_prefix_permissions(bin_dir / "postgres")
        log_file = self.data_dir / SERVER_LOG
        log_file.touch()
        for path in (self.pgdata, log_file):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        self.pgdata.chmod(0o700)

    def _initdb(self, bin_dir: Path) -> None:
        log.info("initialising an embedded PostgreSQL cluster in %s", self.pgdata)
        self._run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
            ],
            "initdb",
        )

    def _running_socket_dir(self, bin_dir: Path) -> Path | None:
        """The socket directory of a server already running on pgdata, else None."""
        status = subprocess.run(
            [str(bin_dir / "pg_ctl"), "-D", str(self.pgdata), "status"],
            capture_output=True,
            text=True,
            check=False,
            user=self._run_as,
        )
        if status.returncode != 0:
            return None
        lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        # postmaster.pid line 5 is the first socket directory.
        return Path(lines[4]) if len(lines) > 4 and lines[4] else None

    def _socket_dir(self) -> Path:
        preferred = self.data_dir / "run"
        if len(str(preferred)) <= SOCKET_DIR_MAX_LENGTH:
            preferred.mkdir(exist_ok=True)
            path = preferred
        else:
            path = Path(tempfile.mkdtemp(prefix="notifier-pg-"))
        if self._run_as is not None:
            path.chmod(0o777)
        return path

    def _start_server(self, bin_dir: Path) -> Path:
        socket_dir = self._socket_dir()
        options = [f"-k {socket_dir}", "-c listen_addresses=''", f"-p {PORT}"]
        options += [f"-c {key}={value}" for key, value in self.server_settings.items()]
        log_file = self.data_dir / SERVER_LOG
        self._pg_ctl(bin_dir, ["-w", "-l", str(log_file), "-o", " ".join(options), "start"])
        return socket_dir

    def _pg_ctl(self, bin_dir: Path, args: list[str]) -> None:
        self._run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(self.pgdata),
                "-t",
                str(PG_CTL_TIMEOUT_SECONDS),
                *args,
            ],
            "pg_ctl " + args[-1],
        )

    def _run(self, argv: list[str], what: str) -> None:
        kwargs: dict[str, Any] = {"user": self._run_as} if self._run_as else {}
        # Output goes to a file, not a pipe: pg_ctl's server child inherits the descriptors
        # and a pipe would never reach EOF while the server runs.
        with tempfile.TemporaryFile("w+") as output:
            result = subprocess.run(
                argv, stdout=output, stderr=subprocess.STDOUT, text=True, check=False, **kwargs
            )
            if result.returncode != 0:
                output.seek(0)
                detail = output.read().strip()
                server_log = self.data_dir / SERVER_LOG
                if server_log.exists():
                    tail = server_log.read_text(errors="replace").splitlines()[-15:]
                    detail += "\n--- server log ---\n" + "\n".join(tail)
                raise EmbeddedServerError(f"{what} failed in {self.pgdata}:\n{detail}")
