"""The embedded PostgreSQL is private: another local user can neither reach it nor log in.

The clients that stand in for "another local user" run as `nobody`, which needs root; CI runs
as root, so there these tests never skip.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from notifier.errors import EmbeddedServerError
from notifier.storage.embedded import EmbeddedPostgres, pg_bin
from tests.support.credentials import socket_dir_of, without_credentials

pytestmark = pytest.mark.anyio

OTHER_USER = "nobody"
# A psql that never prompts (-w) and reads no ~/.psqlrc (-X).
PSQL_ARGS = ["-X", "-w", "-A", "-t", "-c", "SELECT current_user"]


def _require_root() -> None:
    if os.geteuid() == 0:
        return
    reason = f"acting as another local user ({OTHER_USER}) needs root, not uid {os.geteuid()}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run this test as root: {reason}")
    pytest.skip(reason)


def as_other_user(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run argv as another local user: its own uid and gid, none of root's groups."""
    _require_root()
    entry = pwd.getpwnam(OTHER_USER)
    return subprocess.run(
        argv,
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=[],
        env={"PATH": "/usr/bin:/bin", "HOME": "/"},
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(tmp_path_factory.mktemp("private") / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_another_local_user_cannot_reach_the_socket_directory(
    embedded: EmbeddedPostgres,
) -> None:
    result = as_other_user([str(pg_bin() / "psql"), embedded.url, *PSQL_ARGS])
    assert result.returncode != 0, f"{OTHER_USER} got a session: {result.stdout}"
    assert "Permission denied" in result.stderr, result.stderr


def test_another_local_user_given_a_way_to_the_socket_still_needs_the_password(
    embedded: EmbeddedPostgres,
) -> None:
    # Open the way to the socket for everyone, as a careless chmod would, and try again.
    socket_dir = socket_dir_of(embedded.url)
    opened = [embedded.data_dir, socket_dir, *socket_dir.glob(".s.PGSQL.*")]
    modes = {path: stat.S_IMODE(path.stat().st_mode) for path in opened}
    try:
        for path in opened:
            path.chmod(modes[path] | 0o007)
        result = as_other_user([str(pg_bin() / "psql"), embedded.url, *PSQL_ARGS])
    finally:
        for path in opened:
            path.chmod(modes[path])
    assert result.returncode != 0, f"{OTHER_USER} got a session: {result.stdout}"
    assert "no password supplied" in result.stderr, result.stderr


async def test_a_client_without_the_password_is_refused(embedded: EmbeddedPostgres) -> None:
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
        conn = await asyncpg.connect(without_credentials(embedded.url))
        await conn.close()


async def test_the_servers_url_logs_in_with_the_generated_password(
    embedded: EmbeddedPostgres,
) -> None:
    conn = await asyncpg.connect(embedded.url)
    try:
        assert await conn.fetchval("SELECT current_user") == "postgres"
    finally:
        await conn.close()


def test_psql_logs_in_with_the_servers_url(embedded: EmbeddedPostgres) -> None:
    result = subprocess.run(
        [str(pg_bin() / "psql"), embedded.url, *PSQL_ARGS],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "postgres"


def test_data_socket_and_password_file_are_private_to_the_server_and_its_user(
    embedded: EmbeddedPostgres,
) -> None:
    server_uid = embedded.server_uid
    socket_dir = socket_dir_of(embedded.url)
    for path in (embedded.pgdata, socket_dir):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
        assert path.stat().st_uid == server_uid, path
    # Nobody but the server's user and ours (and root) may even look inside the data directory.
    assert stat.S_IMODE(embedded.data_dir.stat().st_mode) & 0o007 == 0
    for private in (embedded.password_file, embedded.data_dir / "server.log"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    assert embedded.password_file.stat().st_uid == os.geteuid()


def test_a_directory_shared_with_every_user_is_refused_as_a_data_directory(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp is
    with pytest.raises(EmbeddedServerError, match="shared with every user"):
        EmbeddedPostgres(shared).start()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
