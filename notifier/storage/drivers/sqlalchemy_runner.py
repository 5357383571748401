"""SQLAlchemy 2, sync and async, Core connections and ORM sessions: `text()` with `:pN`
binds, on whichever DBAPI the engine uses (psycopg, psycopg2, asyncpg)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, TextClause, text
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from notifier.storage.drivers import named_style


@cache
def _clause(statement: str) -> TextClause:
    return text(named_style(statement))


def _binds(values: Sequence[object]) -> dict[str, object]:
    return {f"p{n}": value for n, value in enumerate(values, 1)}


def _autocommit(dbapi_connection: DBAPIConnection | None) -> bool:
    # psycopg, psycopg2 and SQLAlchemy's asyncpg adapter all say so on the DBAPI connection.
    return bool(getattr(dbapi_connection, "autocommit", False))


class SQLAlchemyRunner:
    """A SQLAlchemy Connection (or a Session's), as a SyncRunner. SQLAlchemy begins a
    transaction at the first statement, which the caller commits, unless the connection's
    isolation is AUTOCOMMIT."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @classmethod
    def of(cls, conn: object) -> SQLAlchemyRunner | None:
        if isinstance(conn, Session):
            return cls(conn.connection())
        if isinstance(conn, Connection):
            return cls(conn)
        return None

    def in_transaction(self) -> bool:
        return not _autocommit(self._conn.connection.dbapi_connection)

    def fetch_one(self, statement: str, values: Sequence[object]) -> Mapping[str, Any]:
        return dict(self._conn.execute(_clause(statement), _binds(values)).mappings().one())


class AsyncSQLAlchemyRunner:
    """A SQLAlchemy AsyncConnection (or an AsyncSession's), as an AsyncRunner."""

    def __init__(self, conn: AsyncConnection | AsyncSession) -> None:
        self._conn = conn

    @classmethod
    def of(cls, conn: object) -> AsyncSQLAlchemyRunner | None:
        return cls(conn) if isinstance(conn, (AsyncConnection, AsyncSession)) else None

    async def _connection(self) -> AsyncConnection:
        if isinstance(self._conn, AsyncSession):
            return await self._conn.connection()
        return self._conn

    async def in_transaction(self) -> bool:
        raw = await (await self._connection()).get_raw_connection()
        return not _autocommit(raw.dbapi_connection)

    async def fetch_one(self, statement: str, values: Sequence[object]) -> Mapping[str, Any]:
        result = await (await self._connection()).execute(_clause(statement), _binds(values))
        return dict(result.mappings().one())
