"""`notifier api` and `notifier suppressions` as an operator runs them."""

from __future__ import annotations

import signal
from collections.abc import Callable

import anyio
import asyncpg
import httpx
import pytest

from tests.conftest import TEST_SECRET
from tests.support.cli import run_cli, running_cli

pytestmark = pytest.mark.anyio

WAIT = 20


async def test_api_serves_requests_and_stops_cleanly_on_sigterm(
    database_url: str, db: asyncpg.Connection, free_tcp_port_factory: Callable[[], int]
) -> None:
    port = free_tcp_port_factory()
    env = {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
        "NOTIFIER_API_PORT": str(port),
    }
    async with running_cli("api", env=env) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line("API listening")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            created = await client.post(
                "/v1/verifications",
                json={"user_id": "u1", "email": "ada@example.com"},
                headers={"Idempotency-Key": "cli-1"},
            )
            ready = await client.get("/readyz")
            page = await client.get("/verify", params={"token": "0123abcd." + "x" * 43})
        cli.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await cli.process.wait() == 0
    assert created.status_code == 202, created.text
    assert ready.json()["status"] == "ready"
    assert page.status_code == 400
    assert await db.fetchval("SELECT count(*) FROM notifier.email_outbox") == 1
    # Links must never reach the logs, not even an invalid one.
    assert "x" * 43 not in cli.output
    assert "ada@example.com" not in cli.output


async def test_api_refuses_to_start_without_a_token_secret(database_url: str) -> None:
    result = await run_cli("api", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 2
    assert "NOTIFIER_TOKEN_SECRET" in result.stderr


async def test_api_reports_a_taken_port_clearly(
    database_url: str, free_tcp_port_factory: Callable[[], int]
) -> None:
    port = free_tcp_port_factory()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    async with listener:
        result = await run_cli(
            "api",
            env={
                "NOTIFIER_DATABASE_URL": database_url,
                "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
                "NOTIFIER_API_PORT": str(port),
            },
        )
    assert result.returncode == 2
    assert "NOTIFIER_API_PORT" in result.stderr and "Traceback" not in result.stderr


async def test_suppressions_are_listed_and_cleared(
    database_url: str, db: asyncpg.Connection
) -> None:
    await db.execute(
        """INSERT INTO notifier.suppressed_addresses (email, reason, smtp_code)
           VALUES ('gone@example.com', '550 5.1.1 <g***@example.com>: user unknown', 550)"""
    )
    env = {"NOTIFIER_DATABASE_URL": database_url}
    listed = await run_cli("suppressions", "list", env=env)
    cleared = await run_cli("suppressions", "clear", "gone@example.com", env=env)
    again = await run_cli("suppressions", "clear", "gone@example.com", env=env)
    assert listed.returncode == 0 and "gone@example.com" in listed.stdout
    assert cleared.returncode == 0 and "cleared gone@example.com" in cleared.stdout
    assert again.returncode == 1
    assert await db.fetchval("SELECT count(*) FROM notifier.suppressed_addresses") == 0
