"""`notifier api` and `notifier suppressions` as an operator runs them."""

from __future__ import annotations

import signal
from collections.abc import Callable

import anyio
import asyncpg
import httpx
import pytest

from tests.conftest import TEST_SECRET
from tests.support.apps import bearer, make_key
from tests.support.cli import run_cli, running_cli

pytestmark = pytest.mark.anyio

WAIT = 20


def api_env(database_url: str, port: int, public_port: int, **extra: str) -> dict[str, str]:
    return {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
        "NOTIFIER_API_PORT": str(port),
        "NOTIFIER_PUBLIC_PORT": str(public_port),
        **extra,
    }


async def test_api_serves_requests_and_stops_cleanly_on_sigterm(
    database_url: str, db: asyncpg.Connection, free_tcp_port_factory: Callable[[], int]
) -> None:
    port, public_port = free_tcp_port_factory(), free_tcp_port_factory()
    key = await make_key(db, ["request"])
    async with running_cli("api", env=api_env(database_url, port, public_port)) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line("public pages listening")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            created = await client.post(
                "/v1/verifications",
                json={"user_id": "u1", "email": "ada@example.com"},
                headers={"Idempotency-Key": "cli-1", **bearer(key)},
            )
            ready = await client.get("/readyz")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{public_port}") as links:
            page = await links.get("/verify", params={"token": "0123abcd." + "x" * 43})
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


async def test_the_public_port_serves_no_internal_route(
    database_url: str, db: asyncpg.Connection, free_tcp_port_factory: Callable[[], int]
) -> None:
    port, public_port = free_tcp_port_factory(), free_tcp_port_factory()
    key = await make_key(db)
    async with running_cli("api", env=api_env(database_url, port, public_port)) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line("public pages listening")
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{public_port}", headers=bearer(key)
        ) as links:
            statuses = {
                path: (await links.request(method, path, json={})).status_code
                for method, path in (
                    ("POST", "/v1/verifications"),
                    ("GET", "/metrics"),
                    ("GET", "/docs"),
                    ("GET", "/openapi.json"),
                    ("GET", "/v1/suppressions"),
                )
            }
    assert set(statuses.values()) == {404}, statuses
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 0


async def test_a_body_that_trickles_in_is_cut_off_with_408(
    database_url: str, db: asyncpg.Connection, free_tcp_port_factory: Callable[[], int]
) -> None:
    port, public_port = free_tcp_port_factory(), free_tcp_port_factory()
    key = await make_key(db)
    env = api_env(database_url, port, public_port, NOTIFIER_HTTP_BODY_TIMEOUT="0.5")
    async with running_cli("api", env=env) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line("public pages listening")
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(
                b"POST /v1/verifications HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nIdempotency-Key: slow\r\n"
                + f"Authorization: Bearer {key}\r\n".encode()
                + b"Content-Length: 100\r\n\r\n{"
            )
            with anyio.fail_after(WAIT):
                reply = await stream.receive()
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 0


async def test_beyond_the_concurrency_limit_requests_are_refused_at_once(
    database_url: str, free_tcp_port_factory: Callable[[], int]
) -> None:
    port, public_port = free_tcp_port_factory(), free_tcp_port_factory()
    env = api_env(database_url, port, public_port, NOTIFIER_HTTP_LIMIT_CONCURRENCY="2")
    async with running_cli("api", env=env) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line("public pages listening")
        # Two idle connections hold the whole allowance; the third is turned away.
        held = [await anyio.connect_tcp("127.0.0.1", public_port) for _ in range(2)]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{public_port}") as client:
                refused = await client.get("/healthz")
        finally:
            for stream in held:
                await stream.aclose()
    assert refused.status_code == 503


async def test_api_refuses_to_start_without_a_token_secret(database_url: str) -> None:
    result = await run_cli("api", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 2
    assert "NOTIFIER_TOKEN_SECRET" in result.stderr


async def test_api_refuses_one_port_for_both_listeners(database_url: str) -> None:
    result = await run_cli("api", env=api_env(database_url, 8123, 8123))
    assert result.returncode == 2
    assert "NOTIFIER_PUBLIC_PORT" in result.stderr and "Traceback" not in result.stderr


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


async def test_a_listed_reason_can_neither_draw_on_the_terminal_nor_fake_a_row(
    database_url: str, db: asyncpg.Connection
) -> None:
    # Stored as an earlier release stored replies: whole, escapes and line breaks included.
    hostile = "550 5.1.1 \x1b[2J\x1b[31mgone\nfake@row.example\t2026-01-01 00:00\tuntil cleared"
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason, smtp_code) VALUES ($1, $2, 550)",
        "gone@example.com",
        hostile,
    )
    listed = await run_cli("suppressions", "list", env={"NOTIFIER_DATABASE_URL": database_url})
    assert listed.returncode == 0
    assert "\x1b" not in listed.stdout and "\\x1b[2J" in listed.stdout
    assert listed.stdout.count("\n") == 1, listed.stdout  # one suppression, one row
