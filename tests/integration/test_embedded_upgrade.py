"""Clusters made before the embedded server was locked down ask for the password from their
next start on: the password is generated and set, pg_hba.conf stops trusting, data is kept."""

from __future__ import annotations

import stat
from pathlib import Path

import asyncpg
import pytest

from notifier.errors import EmbeddedServerError
from notifier.storage.embedded import EmbeddedPostgres, hba_trusts
from tests.support.credentials import socket_dir_of, without_credentials
from tests.support.legacy_cluster import (
    KEPT_TABLE,
    create_kept_table,
    make_trust_cluster,
    stop_cluster,
)

pytestmark = pytest.mark.anyio


async def assert_locked_down(server: EmbeddedPostgres) -> None:
    assert not hba_trusts((server.pgdata / "pg_hba.conf").read_text())
    assert stat.S_IMODE(socket_dir_of(server.url).stat().st_mode) == 0o700
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
        conn = await asyncpg.connect(without_credentials(server.url))
        await conn.close()
    conn = await asyncpg.connect(server.url)
    try:
        assert await conn.fetchval(f"SELECT n FROM {KEPT_TABLE}") == 7
    finally:
        await conn.close()


async def test_a_stopped_trust_cluster_asks_for_the_password_after_its_next_start(
    tmp_path: Path,
) -> None:
    await create_kept_table(make_trust_cluster(tmp_path))
    stop_cluster(tmp_path)
    server = EmbeddedPostgres(tmp_path)
    server.start()
    try:
        await assert_locked_down(server)
    finally:
        server.stop()


async def test_a_trust_server_left_running_is_restarted_asking_for_the_password(
    tmp_path: Path,
) -> None:
    legacy_url = make_trust_cluster(tmp_path)  # running, as an owner killed with SIGKILL left it
    await create_kept_table(legacy_url)
    server = EmbeddedPostgres(tmp_path)
    server.start()
    try:
        await assert_locked_down(server)
        with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
            conn = await asyncpg.connect(legacy_url)
            await conn.close()
    finally:
        server.stop()


async def test_an_upgraded_cluster_starts_again_with_the_same_password(tmp_path: Path) -> None:
    await create_kept_table(make_trust_cluster(tmp_path))
    stop_cluster(tmp_path)
    with EmbeddedPostgres(tmp_path):
        password = (tmp_path / "pgpass").read_text()
    server = EmbeddedPostgres(tmp_path)
    server.start()
    try:
        await assert_locked_down(server)
        assert (tmp_path / "pgpass").read_text() == password
    finally:
        server.stop()


def test_a_locked_cluster_whose_password_file_is_gone_is_a_clear_error(tmp_path: Path) -> None:
    with EmbeddedPostgres(tmp_path):
        pass
    (tmp_path / "pgpass").unlink()
    with pytest.raises(EmbeddedServerError, match="asks for a password"):
        EmbeddedPostgres(tmp_path).start()
    assert not EmbeddedPostgres(tmp_path).is_running()
