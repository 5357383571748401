"""`notifier migrate` as an operator runs it: repeatable, concurrent-safe, strict about history."""

from __future__ import annotations

import anyio
import asyncpg
import pytest

from notifier.storage import migrations
from tests.support.cli import Result, log_records, run_cli

pytestmark = pytest.mark.anyio


async def _ledger(url: str) -> list[int]:
    conn = await asyncpg.connect(url)
    try:
        return [
            r["version"]
            for r in await conn.fetch(
                "SELECT version FROM notifier.schema_migrations ORDER BY version"
            )
        ]
    finally:
        await conn.close()


async def test_migrate_twice_exits_zero_and_leaves_one_schema(empty_database_url: str) -> None:
    env = {"NOTIFIER_DATABASE_URL": empty_database_url}
    first = await run_cli("migrate", env=env)
    second = await run_cli("migrate", env=env)
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert "applied 0001_" in first.stdout
    assert "up to date" in second.stdout
    assert await _ledger(empty_database_url) == [m.version for m in migrations.discover()]


async def test_migrate_prints_no_log_line_by_default(empty_database_url: str) -> None:
    result = await run_cli("migrate", env={"NOTIFIER_DATABASE_URL": empty_database_url})
    assert result.returncode == 0, result.stderr
    assert "applied 0001_" in result.stdout
    assert log_records(result.stdout, result.stderr) == []


async def test_migrate_with_verbose_logs_each_migration_it_applies(
    empty_database_url: str,
) -> None:
    result = await run_cli("-v", "migrate", env={"NOTIFIER_DATABASE_URL": empty_database_url})
    assert result.returncode == 0, result.stderr
    logged = [r["msg"] for r in log_records(result.stderr) if r["level"] == "info"]
    assert "applied migration 0001_verifications_outbox" in logged
    assert log_records(result.stdout) == []  # stdout stays the command's answer


async def test_migrate_takes_verbose_after_the_command_too(empty_database_url: str) -> None:
    result = await run_cli("migrate", "-v", env={"NOTIFIER_DATABASE_URL": empty_database_url})
    assert result.returncode == 0, result.stderr
    logged = [r["msg"] for r in log_records(result.stderr) if r["level"] == "info"]
    assert "applied migration 0001_verifications_outbox" in logged


async def test_migrate_still_warns_by_default_of_migrations_this_release_does_not_know(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO notifier.schema_migrations (version, name, checksum) "
            "VALUES (9999, 'from_a_newer_release', 'f00d')"
        )
    finally:
        await conn.close()
    result = await run_cli("migrate", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 0, result.stderr
    warned = [r["msg"] for r in log_records(result.stderr) if r["level"] == "warning"]
    assert warned == ["the database has migrations this release does not know: 9999"]


async def test_migrate_goes_to_the_listen_url_which_keeps_a_session(
    empty_database_url: str,
) -> None:
    # The migration lock is held across statements, which a transaction-mode pooler at
    # NOTIFIER_DATABASE_URL would break: migrate uses the session URL instead.
    env = {
        "NOTIFIER_DATABASE_URL": "postgresql://nobody@127.0.0.1:9/nowhere",
        "NOTIFIER_LISTEN_DATABASE_URL": empty_database_url,
    }
    result = await run_cli("migrate", env=env)
    assert result.returncode == 0, result.stderr
    assert await _ledger(empty_database_url) == [m.version for m in migrations.discover()]


async def test_two_migrate_processes_at_once_both_exit_zero(empty_database_url: str) -> None:
    env = {"NOTIFIER_DATABASE_URL": empty_database_url}
    results: list[Result] = []

    async def migrate() -> None:
        results.append(await run_cli("migrate", env=env))

    async with anyio.create_task_group() as tg:
        tg.start_soon(migrate)
        tg.start_soon(migrate)
    assert [r.returncode for r in results] == [0, 0], results
    assert sorted("applied" in r.stdout for r in results) == [False, True]
    assert await _ledger(empty_database_url) == [m.version for m in migrations.discover()]


async def test_migrate_refuses_a_changed_applied_migration(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE notifier.schema_migrations SET checksum = 'f00d' WHERE version = 1"
        )
    finally:
        await conn.close()
    result = await run_cli("migrate", env={"NOTIFIER_DATABASE_URL": database_url})
    assert result.returncode == 2
    assert "migration 0001" in result.stderr and "forward-only" in result.stderr
    assert "Traceback" not in result.stderr


async def test_migrate_status_exits_nonzero_while_migrations_are_pending(
    empty_database_url: str,
) -> None:
    env = {"NOTIFIER_DATABASE_URL": empty_database_url}
    before = await run_cli("migrate", "--status", env=env)
    await run_cli("migrate", env=env)
    after = await run_cli("migrate", "--status", env=env)
    assert (before.returncode, after.returncode) == (1, 0)
    assert "0001_verifications_outbox: pending" in before.stdout
    assert "0001_verifications_outbox: applied" in after.stdout


async def test_invalid_database_url_is_named_in_a_clear_error() -> None:
    result = await run_cli("migrate", env={"NOTIFIER_DATABASE_URL": "mysql://nope"})
    assert result.returncode == 2
    assert "NOTIFIER_DATABASE_URL" in result.stderr
    assert "Traceback" not in result.stderr
