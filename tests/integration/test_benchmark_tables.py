"""The benchmarks empty every table the product writes between phases, so that each phase
starts from the same state: a table a migration adds must join that list, or be named here
as one the benchmarks keep on purpose."""

from __future__ import annotations

import re

import asyncpg
import pytest

from benchmarks.cluster import TRUNCATE

pytestmark = pytest.mark.anyio

# Set up once per benchmark run, never written by a delivery: the schema's own record, the
# keys and roles, the console's sign-outs; the events phase adds and removes its endpoint.
KEPT = {
    "notifier.schema_migrations",
    "notifier.runtime_roles",
    "notifier.api_keys",
    "notifier.session_sign_outs",
    "notifier.webhook_endpoints",
}


async def test_the_benchmarks_empty_every_table_the_product_writes(
    db: asyncpg.Connection,
) -> None:
    tables = {
        f"notifier.{row['tablename']}"
        for row in await db.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'notifier'")
    }
    emptied = set(re.findall(r"notifier\.\w+", TRUNCATE))
    assert emptied <= tables
    assert tables - emptied == KEPT
