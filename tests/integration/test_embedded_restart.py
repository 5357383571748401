"""EmbeddedPostgres.restart: the soak's database fault, in place and at the same URL."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from notifier.errors import EmbeddedServerError
from notifier.storage.embedded import EmbeddedPostgres

pytestmark = pytest.mark.anyio

# Durability buys nothing in a throwaway cluster.
FAST = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}


async def test_restart_closes_connections_and_keeps_data_settings_and_url(
    tmp_path: Path,
) -> None:
    server = EmbeddedPostgres(tmp_path / "pg", FAST)
    url = server.start()
    try:
        before = await asyncpg.connect(url)
        try:
            await before.execute("CREATE TABLE kept (n integer); INSERT INTO kept VALUES (7)")
            started = await before.fetchval("SELECT pg_postmaster_start_time()")

            server.restart()

            with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
                await before.fetchval("SELECT 1")
        finally:
            await before.close()
        assert server.url == url
        after = await asyncpg.connect(url)
        try:
            assert await after.fetchval("SELECT n FROM kept") == 7
            assert await after.fetchval("SELECT pg_postmaster_start_time()") > started
            # The settings it was started with survive the restart.
            assert await after.fetchval("SHOW fsync") == "off"
        finally:
            await after.close()
    finally:
        server.stop()
    assert not server.is_running()


def test_restart_of_a_server_that_is_not_running_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedServerError, match="not running"):
        EmbeddedPostgres(tmp_path / "pg").restart()
