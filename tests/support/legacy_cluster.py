"""A cluster made the way notifier made them before it locked the embedded server down:
trust authentication, a socket directory open to everyone, a server run with root's group."""

from __future__ import annotations

import os
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg

from notifier.storage.embedded import PGDATA_DIR, PORT, SERVER_LOG, SERVER_USER, SOCKET_DIR, pg_bin

# What every test puts in a legacy cluster, to find again after the upgrade.
KEPT_TABLE = "kept_across_the_upgrade"


def _run(argv: list[str]) -> None:
    kwargs: dict[str, Any] = {"user": SERVER_USER} if os.geteuid() == 0 else {}
    with tempfile.TemporaryFile("w+") as output:
        result = subprocess.run(
            argv, stdout=output, stderr=subprocess.STDOUT, text=True, check=False, **kwargs
        )
        output.seek(0)
        assert result.returncode == 0, output.read()


def make_trust_cluster(data_dir: Path) -> str:
    """A legacy cluster in data_dir, running; returns its URL (no password: it trusts every
    local connection)."""
    bin_dir = pg_bin()
    pgdata, socket_dir, log_file = (
        data_dir / PGDATA_DIR,
        data_dir / SOCKET_DIR,
        data_dir / SERVER_LOG,
    )
    for directory in (pgdata, socket_dir):
        directory.mkdir(parents=True)
    log_file.touch()
    if os.geteuid() == 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pgserver's platformdirs warning, not ours
            from pgserver.utils import ensure_prefix_permissions, ensure_user_exists
        entry = ensure_user_exists(SERVER_USER)
        assert entry is not None
        ensure_prefix_permissions(pgdata)
        # The server's user must reach the binaries too: a virtualenv in a private temporary
        # directory (as CI makes one) is closed to it until then.
        ensure_prefix_permissions(bin_dir / "initdb")
        for path in (pgdata, log_file):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        pgdata.chmod(0o700)
        socket_dir.chmod(0o777)
    _run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(pgdata),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-locale",
        ]
    )
    options = f"-k {socket_dir} -c listen_addresses='' -p {PORT}"
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(pgdata), "-w", "-l", str(log_file)]
    _run([*pg_ctl, "-o", options, "start"])
    url = f"postgresql://postgres@/postgres?host={quote(str(socket_dir))}&port={PORT}"
    return url


async def create_kept_table(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            f"CREATE TABLE {KEPT_TABLE} (n integer); INSERT INTO {KEPT_TABLE} VALUES (7)"
        )
    finally:
        await conn.close()


def stop_cluster(data_dir: Path) -> None:
    """Stop a legacy cluster's server, as its owner's clean exit did."""
    _run([str(pg_bin() / "pg_ctl"), "-D", str(data_dir / PGDATA_DIR), "-w", "-m", "fast", "stop"])
