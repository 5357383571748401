"""Migrations apply once, in order, safely under concurrency, and refuse edited history."""

from __future__ import annotations

import anyio
import pytest

from notifier.errors import ChangedMigrationError
from notifier.storage import migrations
from notifier.storage.database import connect

pytestmark = pytest.mark.anyio


async def test_migrate_applies_every_migration_once_in_order(empty_database_url: str) -> None:
    conn = await connect(empty_database_url)
    try:
        applied = await migrations.migrate(conn)
        assert [m.version for m in applied] == [m.version for m in migrations.discover()]
        assert await migrations.migrate(conn) == []
        ledger = await conn.fetch("SELECT version, checksum FROM notifier.schema_migrations")
        assert {(r["version"], r["checksum"]) for r in ledger} == {
            (m.version, m.checksum) for m in migrations.discover()
        }
    finally:
        await conn.close()


async def test_concurrent_migrations_leave_one_schema(empty_database_url: str) -> None:
    results: list[list[migrations.Migration]] = []

    async def run() -> None:
        conn = await connect(empty_database_url)
        try:
            results.append(await migrations.migrate(conn))
        finally:
            await conn.close()

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(run)

    # Exactly one run did the work; the others waited on the lock and found nothing pending.
    assert sorted(len(r) for r in results) == [0, 0, 0, len(migrations.discover())]
    conn = await connect(empty_database_url)
    try:
        count = await conn.fetchval("SELECT count(*) FROM notifier.schema_migrations")
        assert count == len(migrations.discover())
    finally:
        await conn.close()


async def test_changed_applied_migration_is_refused(empty_database_url: str) -> None:
    original = migrations.discover()
    conn = await connect(empty_database_url)
    try:
        await migrations.migrate(conn, original)
        first = original[0]
        edited = [migrations.Migration(first.version, first.name, first.sql + "\n-- edited\n")]
        with pytest.raises(ChangedMigrationError, match="forward-only") as caught:
            await migrations.migrate(conn, edited + original[1:])
        assert caught.value.version == first.version
    finally:
        await conn.close()


async def test_new_migration_after_applied_ones_is_applied(empty_database_url: str) -> None:
    original = migrations.discover()
    later = migrations.Migration(9999, "later", "CREATE TABLE notifier.later_probe (x int);")
    conn = await connect(empty_database_url)
    try:
        await migrations.migrate(conn, original)
        assert await migrations.migrate(conn, [*original, later]) == [later]
        assert await conn.fetchval("SELECT to_regclass('notifier.later_probe') IS NOT NULL")
    finally:
        await conn.close()


async def test_failing_migration_rolls_back_and_is_not_recorded(empty_database_url: str) -> None:
    original = migrations.discover()
    broken = migrations.Migration(
        9998, "broken", "CREATE TABLE notifier.half_done (x int); SELECT 1/0;"
    )
    conn = await connect(empty_database_url)
    try:
        await migrations.migrate(conn, original)
        with pytest.raises(Exception, match="division by zero"):
            await migrations.migrate(conn, [*original, broken])
        assert not await conn.fetchval("SELECT to_regclass('notifier.half_done') IS NOT NULL")
        current = await migrations.status(conn, [*original, broken])
        assert current.pending == [broken]
    finally:
        await conn.close()


async def test_migrations_unknown_to_this_release_are_reported_not_fatal(
    empty_database_url: str,
) -> None:
    original = migrations.discover()
    newer = migrations.Migration(9997, "from_the_future", "SELECT 1;")
    conn = await connect(empty_database_url)
    try:
        await migrations.migrate(conn, [*original, newer])
        current = await migrations.status(conn, original)
        assert current.unknown == [9997]
        assert current.pending == []
    finally:
        await conn.close()
