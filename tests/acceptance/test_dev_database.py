"""The database `notifier dev` prints: a URL psql and other notifier commands can use while dev
runs (its password stays in a file), or, when configured, where it points, never its password."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest

from notifier.storage.embedded import EmbeddedPostgres, pg_bin, read_password
from tests.support.cli import RunningCli, run_cli, running_cli
from tests.support.credentials import passfile_of
from tests.support.dev_ready import wait_until_ready

pytestmark = pytest.mark.anyio

WAIT = 60  # a first start initialises a cluster


async def database_on(dev: RunningCli) -> str:
    return (await wait_until_ready(dev)).database


async def psql(url: str, query: str) -> str:
    done = await anyio.run_process(
        [str(pg_bin() / "psql"), url, "-X", "-w", "-A", "-t", "-c", query], check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


async def test_dev_prints_a_database_url_that_psql_stats_and_migrate_status_use_while_it_runs(
    tmp_path: Path, free_tcp_port_factory: Callable[[], int]
) -> None:
    data = tmp_path / "data"
    public_port = free_tcp_port_factory()
    env = {
        "NOTIFIER_DATA_DIR": str(data),
        "NOTIFIER_API_PORT": str(free_tcp_port_factory()),
        "NOTIFIER_PUBLIC_PORT": str(public_port),
    }
    async with running_cli("dev", env=env, capture_stdout=True) as dev:
        with anyio.fail_after(WAIT):
            url = await database_on(dev)
        assert (data / "pgpass").read_text().split(":")[-1].strip() not in url
        assert await psql(url, "SELECT count(*) > 0 FROM notifier.schema_migrations") == "t"
        for command in (["stats", "--json"], ["migrate", "--status"]):
            result = await run_cli(*command, env={"NOTIFIER_DATA_DIR": str(data)})
            assert result.returncode == 0, (command, result.stderr)
        by_url = await run_cli("stats", env={"NOTIFIER_DATABASE_URL": url})
        assert by_url.returncode == 0, by_url.stderr
        # Dev and its database are still there.
        async with httpx.AsyncClient() as client:
            health = await client.get(f"http://127.0.0.1:{public_port}/healthz")
            assert health.status_code == 200
        assert await psql(url, "SELECT 1") == "1"
        dev.process.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT):
            assert await dev.process.wait() == 0, dev.output
    assert not EmbeddedPostgres(data).is_running()


def with_password(url: str) -> tuple[str, str]:
    """The URL with its password written into it, and that password."""
    parts = urlsplit(url)
    if parts.password:
        return url, parts.password
    passfile = passfile_of(url)
    # A server that trusts local connections (NOTIFIER_TEST_DATABASE_URL's) ignores it.
    password = (read_password(passfile) if passfile else None) or "ignored-by-a-trusting-server"
    netloc = f"{parts.username or 'postgres'}:{password}@{parts.netloc.rpartition('@')[2]}"
    return urlunsplit(parts._replace(netloc=netloc)), password


async def test_dev_names_a_configured_database_without_its_password(
    database_url: str, tmp_path: Path, free_tcp_port_factory: Callable[[], int]
) -> None:
    url, password = with_password(database_url)
    env = {
        "NOTIFIER_DATABASE_URL": url,
        "NOTIFIER_DATA_DIR": str(tmp_path / "data"),
        "NOTIFIER_API_PORT": str(free_tcp_port_factory()),
        "NOTIFIER_PUBLIC_PORT": str(free_tcp_port_factory()),
    }
    async with running_cli("dev", env=env, capture_stdout=True) as dev:
        with anyio.fail_after(WAIT):
            shown = await database_on(dev)
        assert shown.startswith("NOTIFIER_DATABASE_URL (")
        assert password not in "\n".join(dev.stdout_lines) + dev.output
