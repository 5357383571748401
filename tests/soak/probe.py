"""A soak-side database connection that survives the database restarting under it."""

from __future__ import annotations

from typing import Any

import asyncpg

from notifier.storage.queries import Catalogue

# What the soak reads from outside the product, by name, loaded as the product loads its own.
QUERIES = Catalogue("tests.soak", "queries.sql")
# Seconds one connection attempt or statement may take.
PROBE_TIMEOUT_SECONDS = 5.0


class Probe:
    """One connection for one user (monitor, fault injector); reconnected on demand.

    Each call is a single statement; a failure drops the connection so the next call
    connects afresh, and is raised to the caller, which decides whether to try again.
    """

    def __init__(self, url: str, application_name: str) -> None:
        self.url = url
        self.application_name = application_name
        self._conn: asyncpg.Connection | None = None

    async def fetch(self, name: str, *args: Any) -> list[Any]:
        conn = await self._connection()
        try:
            return list(await conn.fetch(QUERIES.sql(name), *args, timeout=PROBE_TIMEOUT_SECONDS))
        except BaseException:
            await self.close()
            raise

    async def fetchrow(self, name: str, *args: Any) -> Any:
        rows = await self.fetch(name, *args)
        return rows[0] if rows else None

    async def connection(self) -> asyncpg.Connection:
        return await self._connection()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(
                self.url,
                timeout=PROBE_TIMEOUT_SECONDS,
                server_settings={"application_name": self.application_name},
            )
        return self._conn
