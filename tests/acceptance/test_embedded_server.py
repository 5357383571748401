"""The embedded PostgreSQL: started on demand, reused, stopped at exit, owned by one process,
used by others while it runs."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from notifier.storage.embedded import OWNER_FILE, PGDATA_DIR, EmbeddedPostgres
from tests.support.cli import cli_env, run_cli

pytestmark = pytest.mark.anyio

# A process that owns the embedded server until it is killed; it prints the URL once ready.
HOLDER = """
import sys, time
from pathlib import Path
from notifier.storage.embedded import EmbeddedPostgres
server = EmbeddedPostgres(Path(sys.argv[1]))
print(server.start(), flush=True)
time.sleep(600)
"""


def _server_running(data_dir: Path) -> bool:
    return EmbeddedPostgres(data_dir).is_running()


def _start_holder(data_dir: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data_dir)],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().startswith("postgresql://"), holder.stderr
    return holder


async def test_migrate_without_a_url_runs_an_embedded_server_and_stops_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {"NOTIFIER_DATA_DIR": str(data_dir)}
    first = await run_cli("migrate", env=env)
    assert first.returncode == 0, first.stderr
    assert not _server_running(data_dir)
    # The cluster is kept: a second run finds the schema already there.
    second = await run_cli("migrate", env=env)
    assert second.returncode == 0, second.stderr
    assert "up to date" in second.stdout


async def test_default_data_directory_is_dot_notifier_in_the_working_directory(
    tmp_path: Path,
) -> None:
    result = await run_cli("migrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / ".notifier" / PGDATA_DIR / "PG_VERSION").exists()


async def test_second_process_uses_the_owners_server_without_stopping_it(
    tmp_path: Path,
) -> None:
    holder = _start_holder(tmp_path)
    try:
        env = {"NOTIFIER_DATA_DIR": str(tmp_path)}
        # -v: which server a command for a person uses is INFO detail, logged only when asked.
        applied = await run_cli("-v", "migrate", env=env)
        assert applied.returncode == 0, applied.stderr
        assert f"that process {holder.pid} runs" in applied.stderr
        status = await run_cli("migrate", "--status", env=env)
        assert status.returncode == 0, status.stderr
        assert holder.poll() is None
        assert _server_running(tmp_path)
    finally:
        holder.kill()
        holder.communicate()
        await run_cli("migrate", env={"NOTIFIER_DATA_DIR": str(tmp_path)})  # adopts and stops it


async def test_a_command_while_the_owner_has_no_server_up_yet_gets_a_clear_message(
    tmp_path: Path,
) -> None:
    # This test owns the directory, as a process still initialising the cluster would.
    with (tmp_path / OWNER_FILE).open("w") as owner:
        fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        owner.write(str(os.getpid()))
        owner.flush()
        result = await run_cli("stats", env={"NOTIFIER_DATA_DIR": str(tmp_path)})
    assert result.returncode == 2
    assert f"in use by process {os.getpid()}" in result.stderr
    assert "not accepting connections yet" in result.stderr
    assert "Traceback" not in result.stderr


async def test_owner_killed_with_sigkill_leaves_no_stale_lock(tmp_path: Path) -> None:
    holder = _start_holder(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.communicate()
    assert _server_running(tmp_path)  # the orphaned server is still up
    result = await run_cli("migrate", env={"NOTIFIER_DATA_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "adopting" in result.stderr
    assert not _server_running(tmp_path)
