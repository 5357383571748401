"""Least privilege: migrations as the owner, everything else as a role `notifier grants` made.

api, worker, stats and cleanup run here as that role alone, as real processes.
"""

from __future__ import annotations

import secrets
import signal
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit, urlunsplit

import anyio
import asyncpg
import httpx
import pytest

from notifier.storage.database import connect
from tests.conftest import TEST_SECRET
from tests.support.apps import bearer, make_key
from tests.support.cli import run_cli, running_cli
from tests.support.databases import unique_name
from tests.support.smtp_server import SmtpServer

pytestmark = pytest.mark.anyio

WAIT = 30


def as_role(url: str, role: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}:{password}@{host}"))


@pytest.fixture
async def runtime_url(database_url: str, db: asyncpg.Connection) -> AsyncIterator[str]:
    """The test database's URL as a fresh login role granted by `notifier grants`."""
    role = unique_name("notifier_runtime")
    # The embedded server asks every role for its password.
    password = secrets.token_hex(16)
    await db.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
    try:
        granted = await run_cli("grants", role, env={"NOTIFIER_DATABASE_URL": database_url})
        assert granted.returncode == 0, granted.stderr
        yield as_role(database_url, role, password)
    finally:
        await db.execute(f'DROP OWNED BY "{role}"')
        await db.execute(f'DROP ROLE "{role}"')


async def test_the_runtime_role_suffices_for_api_worker_stats_and_cleanup(
    runtime_url: str,
    db: asyncpg.Connection,
    smtp_server: SmtpServer,
    free_tcp_port_factory: Callable[[], int],
) -> None:
    key = await make_key(db, ["request", "read"])
    port, public_port = free_tcp_port_factory(), free_tcp_port_factory()
    common = {"NOTIFIER_DATABASE_URL": runtime_url, "NOTIFIER_TOKEN_SECRET": TEST_SECRET}
    worker_env = {
        **common,
        "NOTIFIER_SMTP_HOST": smtp_server.host,
        "NOTIFIER_SMTP_PORT": str(smtp_server.port),
        "NOTIFIER_CLEANUP_INTERVAL": "0",
    }
    api_env = {**common, "NOTIFIER_API_PORT": str(port), "NOTIFIER_PUBLIC_PORT": str(public_port)}
    async with (
        running_cli("worker", env=worker_env) as worker,
        running_cli("api", env=api_env) as api,
    ):
        with anyio.fail_after(WAIT):
            await worker.wait_for_line("delivering (")
            await api.wait_for_line("public pages listening")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=bearer(key)) as c:
            created = await c.post(
                "/v1/verifications",
                json={"user_id": "u1", "email": "least@example.com"},
                headers={"Idempotency-Key": "least-1"},
            )
            assert created.status_code == 202, created.text
            await smtp_server.wait_for(1, timeout=WAIT)
            ready = await c.get("/readyz")
        for process in (worker, api):
            process.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await worker.process.wait() == 0, worker.output
            assert await api.process.wait() == 0, api.output
    # A clean stop waits for the completion of what the mail server accepted.
    status = await db.fetchval("SELECT status FROM notifier.email_outbox")
    assert status == "sent" and ready.json()["status"] == "ready"
    await db.execute("UPDATE notifier.email_outbox SET completed_at = now() - interval '400 days'")
    stats = await run_cli("stats", "--json", env=common)
    cleanup = await run_cli("cleanup", env=common)
    assert stats.returncode in (0, 1), stats.stderr  # 1 only for an alert, never for access
    assert cleanup.returncode == 0, cleanup.stderr
    assert "deleted 1 " in cleanup.stdout
    assert "permission denied" not in worker.output + api.output


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE notifier.extra (id int)",
        "ALTER TABLE notifier.email_outbox ADD COLUMN extra int",
        "UPDATE notifier.api_keys SET scopes = '{admin}'",
        "INSERT INTO notifier.api_keys (id, name, scopes, secret_hash) "
        "VALUES ('0123456789ab', 'x', '{admin}', '\\x00')",
        "DELETE FROM notifier.delivery_attempts",
        "SELECT notifier.grant_runtime_v1(current_user)",
    ],
)
async def test_the_runtime_role_cannot_change_the_schema_keys_or_history(
    runtime_url: str, statement: str
) -> None:
    conn = await connect(runtime_url)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(statement)
    finally:
        await conn.close()


# Tables only the owner touches: the ledger of roles to re-grant.
OWNER_ONLY = {"runtime_roles"}


async def test_every_table_a_migration_adds_reaches_the_runtime_role(
    runtime_url: str, db: asyncpg.Connection
) -> None:
    role = urlsplit(runtime_url).username
    ungranted = await db.fetch(
        """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'notifier' AND c.relkind IN ('r', 'p')
             AND NOT has_table_privilege($1, c.oid, 'SELECT')""",
        role,
    )
    assert {r["relname"] for r in ungranted} == OWNER_ONLY


async def test_an_owners_command_run_as_the_runtime_role_says_so_without_a_traceback(
    runtime_url: str,
) -> None:
    result = await run_cli(
        "keys", "create", "app", "--scope", "request", env={"NOTIFIER_DATABASE_URL": runtime_url}
    )
    assert result.returncode == 2
    assert "owns the notifier schema" in result.stderr and "Traceback" not in result.stderr
