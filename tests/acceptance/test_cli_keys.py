"""`notifier keys`: API keys as an operator makes, lists and revokes them."""

from __future__ import annotations

import hashlib
import re

import asyncpg
import pytest

from notifier.storage import api_keys
from notifier.storage.database import describe
from tests.support.cli import log_records, run_cli

pytestmark = pytest.mark.anyio

KEY = re.compile(r"^nfk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$")


async def test_create_prints_the_key_once_and_the_database_keeps_only_its_hash(
    database_url: str, db: asyncpg.Connection
) -> None:
    env = {"NOTIFIER_DATABASE_URL": database_url}
    created = await run_cli("keys", "create", "signup-app", "--scope", "request,read", env=env)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert KEY.fullmatch(key), created.stdout
    row = await db.fetchrow("SELECT * FROM notifier.api_keys")
    assert (row["id"], row["name"], row["scopes"]) == (key[4:16], "signup-app", ["request", "read"])
    assert bytes(row["secret_hash"]) == hashlib.sha256(key.encode()).digest()
    dump = " ".join(str(v) for v in dict(row).values())
    assert key[17:] not in dump
    listed = await run_cli("keys", "list", env=env)
    assert key[4:16] in listed.stdout and key[17:] not in listed.stdout


async def test_create_refuses_an_unknown_scope_and_writes_nothing(
    database_url: str, db: asyncpg.Connection
) -> None:
    env = {"NOTIFIER_DATABASE_URL": database_url}
    result = await run_cli("keys", "create", "app", "--scope", "request,root", env=env)
    assert result.returncode == 2 and "root" in result.stderr
    assert await db.fetchval("SELECT count(*) FROM notifier.api_keys") == 0


async def test_list_shows_scopes_last_use_and_revocation(
    database_url: str, db: asyncpg.Connection
) -> None:
    env = {"NOTIFIER_DATABASE_URL": database_url}
    new = await api_keys.create(db, "prometheus", ["metrics"])
    revoked = await run_cli("keys", "revoke", new.id, env=env)
    listed = await run_cli("keys", "list", env=env)
    assert revoked.returncode == 0, revoked.stderr
    [line] = listed.stdout.splitlines()
    assert line.startswith(f"{new.id}\tprometheus\tmetrics\t")
    assert "last used never" in line and "revoked" in line


async def test_list_prints_no_log_line_by_default(database_url: str) -> None:
    result = await run_cli("keys", "list", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 0, result.stderr
    assert "no API keys" in result.stdout
    assert log_records(result.stdout, result.stderr) == []


async def test_list_with_verbose_logs_which_database_it_uses(database_url: str) -> None:
    result = await run_cli("-v", "keys", "list", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 0, result.stderr
    logged = [r["msg"] for r in log_records(result.stderr) if r["level"] == "info"]
    assert logged == [f"using the database at {describe(database_url)}"]


async def test_create_prints_no_log_line_by_default(database_url: str) -> None:
    result = await run_cli("keys", "create", "app", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 0, result.stderr
    assert KEY.match(result.stdout.strip())
    assert log_records(result.stdout, result.stderr) == []


async def test_revoking_an_unknown_key_is_a_clear_error(database_url: str) -> None:
    result = await run_cli(
        "keys", "revoke", "0123456789ab", env={"NOTIFIER_DATABASE_URL": database_url}
    )
    assert result.returncode == 2 and "0123456789ab" in result.stderr


async def test_a_deployment_registers_its_generated_key_idempotently(
    database_url: str, db: asyncpg.Connection
) -> None:
    generated = await run_cli("keys", "generate")
    key = generated.stdout.strip()
    assert KEY.fullmatch(key)
    env = {"NOTIFIER_DATABASE_URL": database_url, "APP_KEY": key}
    args = ("keys", "create", "app", "--scope", "request", "--key-from-env", "APP_KEY")
    first, second = await run_cli(*args, env=env), await run_cli(*args, env=env)
    assert (first.returncode, second.returncode) == (0, 0), second.stderr
    assert key not in first.stdout + first.stderr
    assert await db.fetchval("SELECT count(*) FROM notifier.api_keys") == 1
    other = await run_cli(
        "keys", "create", "app", "--scope", "admin", "--key-from-env", "APP_KEY", env=env
    )
    assert other.returncode == 2 and "scopes" in other.stderr
