"""psycopg 3, sync and async: `%s` parameters, rows as dicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from notifier.storage.drivers import format_style


def _in_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    # Without autocommit, psycopg opens a transaction at the first statement, which the
    # caller commits; with it, only an explicit `conn.transaction()` block is one.
    return not conn.autocommit or conn.info.transaction_status == TransactionStatus.INTRANS


class PsycopgRunner:
    """A psycopg Connection, as a SyncRunner."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    @classmethod
    def of(cls, conn: object) -> PsycopgRunner | None:
        return cls(conn) if isinstance(conn, psycopg.Connection) else None

    def in_transaction(self) -> bool:
        return _in_transaction(self._conn)

    def fetch_one(self, statement: str, values: Sequence[object]) -> Mapping[str, Any]:
        with self._conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(format_style(statement), list(values))
            row = cursor.fetchone()
        if row is None:
            raise LookupError("the statement returned no row")
        return row


class AsyncPsycopgRunner:
    """A psycopg AsyncConnection, as an AsyncRunner."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    @classmethod
    def of(cls, conn: object) -> AsyncPsycopgRunner | None:
        return cls(conn) if isinstance(conn, psycopg.AsyncConnection) else None

    async def in_transaction(self) -> bool:
        return _in_transaction(self._conn)

    async def fetch_one(self, statement: str, values: Sequence[object]) -> Mapping[str, Any]:
        async with self._conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(format_style(statement), list(values))
            row = await cursor.fetchone()
        if row is None:
            raise LookupError("the statement returned no row")
        return row
