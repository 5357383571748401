"""The embedded PostgreSQL: a real server from the pgserver wheel, in a directory notifier owns."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pwd
import secrets
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
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
SOCKET_DIR = "run"
# The superuser's generated password, as a libpq password file (host:port:db:user:password):
# psql and asyncpg read it through the URL's `passfile`, so no URL carries the password.
PASSWORD_FILE = "pgpass"
PASSWORD_BYTES = 32
SUPERUSER = "postgres"
AUTH_METHOD = "scram-sha-256"
PORT = 5432
# postmaster.pid, 0-based lines: the port, the first socket directory, and the status.
PID_PORT_LINE = 3
PID_SOCKET_DIR_LINE = 4
PID_STATUS_LINE = 7
PID_STATUS_READY = "ready"


def pg_bin() -> Path:
    """The directory of the pgserver wheel's PostgreSQL programs."""
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
    with EmbeddedServerBusy; `embedded_url` lets it use the owner's server instead),
    initialises the cluster on first use, starts the server, or adopts one a crashed owner
    left running, and yields its URL. Leaving stops the server and releases the lock. The
    lock is a kernel file lock, so a crashed owner never leaves a stale one behind: its
    successor takes over and says so.

    The server is private to the user who runs notifier: it listens on a Unix socket only,
    in a directory only the server's user may enter; nobody else may enter the data
    directory; and the superuser logs in with a generated password (scram-sha-256) kept in
    an owner-only password file that the URL names. A cluster an earlier version made with
    trust authentication is switched to the password on its next start.
    """

    def __init__(self, data_dir: Path, server_settings: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self.pgdata = self.data_dir / PGDATA_DIR
        self.password_file = self.data_dir / PASSWORD_FILE
        self.server_settings = dict(server_settings or {})
        self._owner: IO[str] | None = None
        self._run_as: str | None = SERVER_USER if os.geteuid() == 0 else None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise EmbeddedServerError("the embedded PostgreSQL is not running")
        return self._url

    @property
    def server_uid(self) -> int:
        """The uid the server runs as: SERVER_USER's when notifier runs as root, else ours."""
        return os.geteuid() if self._run_as is None else pwd.getpwnam(self._run_as).pw_uid

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
        bin_dir = pg_bin()
        try:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            if self.data_dir.stat().st_mode & (stat.S_IWOTH | stat.S_ISVTX):
                # It is about to be closed to everyone else: never a shared one like /tmp.
                raise EmbeddedServerError(
                    f"{self.data_dir} is shared with every user; set NOTIFIER_DATA_DIR to a "
                    "directory of notifier's own (it is created if missing)"
                )
            self._take_ownership()
        except PermissionError as exc:
            raise _not_ours(self.data_dir, exc) from exc
        try:
            fresh = not (self.pgdata / "PG_VERSION").exists()
            trusting = not fresh and hba_trusts(self._hba_file().read_text())
            if trusting and self.is_running():
                # An earlier version ran this server with root's group, which the data
                # directory, closed below, no longer lets through: stop it, to start anew.
                log.warning(
                    "stopping the server an earlier notifier left running in %s", self.pgdata
                )
                self._pg_ctl(bin_dir, ["-m", "fast", "-w", "stop"])
            self._prepare_directories(bin_dir)
            password = self._password(create=fresh or trusting)
            if fresh:
                self._initdb(bin_dir, password)
            socket_dir = self._running_socket_dir(bin_dir)
            if socket_dir is None:
                socket_dir = self._start_server(bin_dir)
            else:
                log.warning(
                    "adopting the PostgreSQL server a previous notifier process left running in %s",
                    self.pgdata,
                )
                self._make_private(socket_dir)
            self._url = self._url_for(socket_dir, PORT)
            if trusting:
                self._require_password(bin_dir, socket_dir, password)
        except BaseException:
            self._url = None
            self._release_ownership()
            raise
        return self._url

    def stop(self) -> None:
        if self._owner is None:
            return
        try:
            if self._url is not None:
                self._pg_ctl(pg_bin(), ["-m", "fast", "-w", "stop"])
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
        self._pg_ctl(pg_bin(), ["-m", "fast", "-w", "-l", str(log_file), "restart"])

    def owners_url(self) -> str | None:
        """The URL of the server running here, read from its pid file, if it accepts
        connections: for a process that uses the server another one owns."""
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            return None
        except PermissionError as exc:
            raise _not_ours(self.data_dir, exc) from exc
        if len(lines) <= PID_STATUS_LINE or lines[PID_STATUS_LINE].strip() != PID_STATUS_READY:
            return None
        return self._url_for(Path(lines[PID_SOCKET_DIR_LINE]), int(lines[PID_PORT_LINE]))

    def _url_for(self, socket_dir: Path, port: int) -> str:
        return (
            f"postgresql://{SUPERUSER}@/{SUPERUSER}?host={quote(str(socket_dir))}&port={port}"
            f"&passfile={quote(str(self.password_file))}"
        )

    # -- ownership -------------------------------------------------------------------------

    def _take_ownership(self) -> None:
        path = self.data_dir / OWNER_FILE
        owner = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+")
        try:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            previous = owner.read().strip()
            owner.close()
            raise EmbeddedServerBusy(
                str(self.data_dir), int(previous) if previous.isdigit() else None
            ) from None
        previous = owner.read().strip()
        if previous.isdigit() and int(previous) != os.getpid():
            log.info(
                "process %s owned %s and exited without releasing it; taking over",
                previous,
                self.data_dir,
            )
        path.chmod(0o600)  # earlier versions left it readable by everyone
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

    # -- privacy ---------------------------------------------------------------------------

    def _server_user(self) -> pwd.struct_passwd | None:
        return None if self._run_as is None else pwd.getpwnam(self._run_as)

    def _as_server(self) -> dict[str, Any]:
        """subprocess arguments that run a program as the server's user, if that is not us."""
        entry = self._server_user()
        if entry is None:
            return {}
        # Its own group and none of root's: the server gets what its user may have, no more.
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _prepare_directories(self, bin_dir: Path) -> None:
        """Close the data directory to everyone but us and the server, which must reach its
        binaries, cluster, socket directory and log through it."""
        log_file = self.data_dir / SERVER_LOG
        log_file.touch(mode=0o600)
        log_file.chmod(0o600)  # the server logs failed statements; earlier versions left it 0644
        if self._run_as is None:
            self.data_dir.chmod(0o700)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pgserver.utils import ensure_user_exists
        entry = ensure_user_exists(self._run_as)
        if entry is None:
            raise EmbeddedServerError(f"could not create the system user {self._run_as!r}")
        # Ours, with the server's group allowed through (not to list it) and nobody else.
        os.chown(self.data_dir, -1, entry.pw_gid)
        self.data_dir.chmod(0o710)
        _let_others_through(self.data_dir)
        _let_others_through(bin_dir / "postgres")
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        for path in (self.pgdata, log_file):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        self.pgdata.chmod(0o700)

    def _make_private(self, directory: Path) -> None:
        """Only the server's user may enter the socket directory (root may anyway)."""
        entry = self._server_user()
        if entry is not None:
            os.chown(directory, entry.pw_uid, entry.pw_gid)
        directory.chmod(0o700)

    def _password(self, create: bool) -> str:
        """The superuser's password from the password file, generated first if `create`."""
        kept = read_password(self.password_file)
        if kept is not None:
            return kept
        if not create:
            raise EmbeddedServerError(
                f"the embedded PostgreSQL in {self.pgdata} asks for a password, and "
                f"{self.password_file}, which held it, is missing: restore it, or delete "
                f"{self.data_dir} to start over with an empty database"
            )
        password = secrets.token_urlsafe(PASSWORD_BYTES)
        _write_private(self.password_file, password_line(password), None)
        return password

    def _hba_file(self) -> Path:
        return self.pgdata / "pg_hba.conf"

    def _require_password(self, bin_dir: Path, socket_dir: Path, password: str) -> None:
        """Switch a cluster an earlier version made with trust authentication to the
        password: set it (trust does not ask for it yet), rewrite pg_hba.conf, restart."""
        log.warning(
            "the embedded PostgreSQL in %s let local users in without a password; "
            "switching it to %s with the password kept in %s",
            self.pgdata,
            AUTH_METHOD,
            self.password_file,
        )
        self._set_superuser_password(bin_dir, socket_dir, password)
        hba = self._hba_file()
        _write_private(hba, hba_without_trust(hba.read_text()), self._server_user())
        # A restart, not a reload (which the server applies whenever it gets to it): once it
        # returns, no connection gets in without the password.
        self.restart()

    def _set_superuser_password(self, bin_dir: Path, socket_dir: Path, password: str) -> None:
        """Set the superuser's password with the server's own psql, as the server's user,
        while the cluster still trusts local connections. The statement goes in on stdin,
        never on a command line another user could read in the process list."""
        if not all(c.isalnum() or c in "-_" for c in password):
            raise EmbeddedServerError("a generated password must be URL-safe base64")
        statement = f"\\set password '{password}'\nALTER ROLE {SUPERUSER} PASSWORD :'password';\n"
        psql = [
            str(bin_dir / "psql"),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            str(socket_dir),
            "-p",
            str(PORT),
            "-U",
            SUPERUSER,
            "-d",
            SUPERUSER,
        ]
        self._run(psql, "psql (setting the password)", stdin=statement)

    # -- server ----------------------------------------------------------------------------

    def is_running(self) -> bool:
        """Whether a server runs on this data directory, whoever started it."""
        return self._running_socket_dir(pg_bin()) is not None

    def _initdb(self, bin_dir: Path, password: str) -> None:
        log.info("initialising an embedded PostgreSQL cluster in %s", self.pgdata)
        # initdb runs as the server's user, which may not read our password file: it gets a
        # file of its own, removed once the cluster exists.
        pwfile = self.data_dir / ".initdb-password"
        _write_private(pwfile, password + "\n", self._server_user())
        try:
            self._run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.pgdata),
                    "-U",
                    SUPERUSER,
                    f"--auth={AUTH_METHOD}",
                    f"--pwfile={pwfile}",
                    "--encoding=UTF8",
                    "--no-locale",
                ],
                "initdb",
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def _running_socket_dir(self, bin_dir: Path) -> Path | None:
        """The socket directory of a server already running on pgdata, else None."""
        status = subprocess.run(
            [str(bin_dir / "pg_ctl"), "-D", str(self.pgdata), "status"],
            capture_output=True,
            text=True,
            check=False,
            **self._as_server(),
        )
        if status.returncode != 0:
            return None
        lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        if len(lines) > PID_SOCKET_DIR_LINE and lines[PID_SOCKET_DIR_LINE]:
            return Path(lines[PID_SOCKET_DIR_LINE])
        return None

    def _socket_dir(self) -> Path:
        preferred = self.data_dir / SOCKET_DIR
        if len(str(preferred)) <= SOCKET_DIR_MAX_LENGTH:
            preferred.mkdir(mode=0o700, exist_ok=True)
            path = preferred
        else:
            path = Path(tempfile.mkdtemp(prefix="notifier-pg-"))
        self._make_private(path)
        return path

    def _start_server(self, bin_dir: Path) -> Path:
        socket_dir = self._socket_dir()
        options = [
            f"-k {socket_dir}",
            "-c listen_addresses=''",
            f"-p {PORT}",
            "-c unix_socket_permissions=0700",
        ]
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

    def _run(self, argv: list[str], what: str, stdin: str | None = None) -> None:
        # Output goes to a file, not a pipe: pg_ctl's server child inherits the descriptors
        # and a pipe would never reach EOF while the server runs.
        with tempfile.TemporaryFile("w+") as output:
            result = subprocess.run(
                argv,
                input=stdin,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
                **self._as_server(),
            )
            if result.returncode != 0:
                output.seek(0)
                detail = output.read().strip()
                server_log = self.data_dir / SERVER_LOG
                if server_log.exists():
                    tail = server_log.read_text(errors="replace").splitlines()[-15:]
                    detail += "\n--- server log ---\n" + "\n".join(tail)
                raise EmbeddedServerError(f"{what} failed in {self.pgdata}:\n{detail}")


@contextlib.contextmanager
def embedded_url(data_dir: Path) -> Iterator[str]:
    """The embedded server's URL for as long as the block runs.

    This process starts the server and stops it after the block, unless another process owns
    the data directory: then the block uses that process's server, neither owning nor
    stopping it (so `notifier stats` works while `notifier dev` runs).
    """
    server = EmbeddedPostgres(data_dir)
    try:
        url = server.start()
    except EmbeddedServerBusy as exc:
        busy = exc
    else:
        try:
            yield url
        finally:
            server.stop()
        return
    shared = server.owners_url()
    if shared is None:
        raise EmbeddedServerBusy(
            busy.data_dir,
            busy.owner_pid,
            "its server is not accepting connections yet (starting or stopping): try again "
            "in a moment",
        )
    log.info(
        "using the embedded PostgreSQL that %s runs in %s",
        f"process {busy.owner_pid}" if busy.owner_pid else "another process",
        server.data_dir,
    )
    yield shared


def password_line(password: str) -> str:
    """The password file's one line: any host, port and database, the superuser.

    token_urlsafe's alphabet has neither of the characters the format escapes (: and \\).
    """
    return f"*:*:*:{SUPERUSER}:{password}\n"


def read_password(path: Path) -> str | None:
    """The superuser's password from a password file written by password_line, if any."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        fields = line.strip().split(":", 4)
        if len(fields) == 5 and fields[3] == SUPERUSER and fields[4]:
            return fields[4]
    return None


def _rule_method(line: str) -> str | None:
    # A rule has at least type, database, user and method; trust takes no options, so a
    # trust rule's method is its last field.
    fields = line.partition("#")[0].split()
    return fields[-1] if len(fields) >= 4 else None


def hba_trusts(hba: str) -> bool:
    """Whether a pg_hba.conf lets some connection in without a password (method trust)."""
    return any(_rule_method(line) == "trust" for line in hba.splitlines())


def hba_without_trust(hba: str) -> str:
    """The pg_hba.conf with every trust rule asking for the password instead; the rest kept."""
    rules = []
    for line in hba.splitlines(keepends=True):
        if _rule_method(line) == "trust":
            rule, mark, comment = line.partition("#")
            at = rule.rindex("trust")
            line = rule[:at] + AUTH_METHOD + rule[at + len("trust") :] + mark + comment
        rules.append(line)
    return "".join(rules)


def _write_private(path: Path, text: str, owner: pwd.struct_passwd | None) -> None:
    """Replace `path` with `text` in one step, mode 0600, owned by `owner` (else by us)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if owner is not None:
            os.chown(temporary, owner.pw_uid, owner.pw_gid)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _let_others_through(path: Path) -> None:
    """Let every user pass through (not list) each directory above `path`, as the server's
    user must to reach it; pgserver's own helper would open them to listing too."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def _not_ours(data_dir: Path, exc: OSError) -> EmbeddedServerError:
    return EmbeddedServerError(
        f"cannot use the embedded PostgreSQL in {data_dir} ({exc.strerror}): only the user "
        "who runs it may, or choose another directory with NOTIFIER_DATA_DIR"
    )
