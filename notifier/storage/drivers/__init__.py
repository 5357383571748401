"""The drivers an application's own transaction can come on: one small runner per driver,
each running one statement of the query catalogue and fetching its one row, in its own
paramstyle. The request itself (notifier.storage.outbox) is written once, for any runner.

Accepted connections, by what they are (nothing here imports a driver the app lacks):
- async: asyncpg `Connection`; psycopg `AsyncConnection`; SQLAlchemy `AsyncConnection` or
  `AsyncSession` (asyncpg or psycopg dialect);
- sync: psycopg `Connection`; SQLAlchemy `Connection` or `Session` (psycopg or psycopg2
  dialect); Django's connection (through notifier.contrib.django).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol

from notifier.storage.connection import Runner

ASYNC_ACCEPTED = (
    "an asyncpg Connection, a psycopg AsyncConnection, or a SQLAlchemy AsyncConnection or "
    "AsyncSession"
)
SYNC_ACCEPTED = (
    "a psycopg Connection, or a SQLAlchemy Connection or Session (or, through "
    "notifier.contrib.django, Django's connection)"
)
_NUMBERED = re.compile(r"\$(\d+)")


class AsyncRunner(Protocol):
    """One statement at a time on an application's async connection."""

    async def in_transaction(self) -> bool:
        """Whether a statement run now belongs to a transaction the caller will end (not
        one that commits by itself)."""
        ...

    async def fetch_one(self, statement: str, values: Sequence[object]) -> Mapping[str, Any]:
        """The one row `statement` (numbered parameters, `$1`...) returns for `values`."""
        ...


class SyncRunner(Protocol):
    """One statement at a time on an application's sync connection."""

    def in_transaction(self) -> bool: ...

    def fetch_one(self, statement: str, values: Sequence[object]) -> Mapping[str, Any]: ...


class CatalogueRunner:
    """One of the package's own connections (storage.connection.Runner: asyncpg's shape,
    numbered parameters), as an AsyncRunner: the statement goes as it is."""

    def __init__(self, conn: Runner) -> None:
        self._conn = conn

    async def in_transaction(self) -> bool:
        return bool(getattr(self._conn, "is_in_transaction", lambda: False)())

    async def fetch_one(self, statement: str, values: Sequence[object]) -> Mapping[str, Any]:
        row = await self._conn.fetchrow(statement, *values)
        if row is None:
            raise LookupError("the statement returned no row")
        return row  # type: ignore[no-any-return]


@lru_cache(maxsize=128)  # a few statements, each rewritten once, not once a call
def format_style(statement: str) -> str:
    """`$1`, `$2`, ... as `%s` (psycopg, Django), with literal `%` doubled; the numbers must
    run in order, each once, as the catalogue's bound statements do."""
    _check_in_order(statement)
    return _NUMBERED.sub("%s", statement.replace("%", "%%"))


def named_style(statement: str) -> str:
    """`$1`, `$2`, ... as `:p1`, `:p2`, ... (SQLAlchemy's text()), a space before any cast:
    text() takes `:p1::uuid` for a literal colon, not a parameter."""
    return _NUMBERED.sub(lambda m: f":p{m[1]} ", statement)


def _check_in_order(statement: str) -> None:
    numbers = [int(n) for n in _NUMBERED.findall(statement)]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ValueError(
            "a statement for the %s paramstyle must number its parameters in order, once each"
        )


def _kind(conn: object) -> str:
    """Which library `conn` comes from, by its type's module: no driver is imported to ask."""
    module = type(conn).__module__.partition(".")[0]
    return module


def async_runner(conn: object) -> AsyncRunner:
    """The runner for `conn`; TypeError naming what is accepted for anything else."""
    kind = _kind(conn)
    if kind == "asyncpg":
        # An asyncpg connection is the package's own shape: no adapter needed.
        return CatalogueRunner(conn)  # type: ignore[arg-type]
    if kind == "psycopg":
        from notifier.storage.drivers.psycopg_runner import AsyncPsycopgRunner

        runner: AsyncRunner | None = AsyncPsycopgRunner.of(conn)
        if runner is not None:
            return runner
    if kind == "sqlalchemy":
        from notifier.storage.drivers.sqlalchemy_runner import AsyncSQLAlchemyRunner

        runner = AsyncSQLAlchemyRunner.of(conn)
        if runner is not None:
            return runner
    sync_hint = kind in ("psycopg", "sqlalchemy") and not _is_async(conn)
    raise TypeError(
        f"request_verification takes {ASYNC_ACCEPTED}, not {type(conn).__qualname__}"
        + (" (use request_verification_sync for a sync connection)" if sync_hint else "")
    )


def sync_runner(conn: object) -> SyncRunner:
    """The runner for `conn`; TypeError naming what is accepted for anything else."""
    kind = _kind(conn)
    if kind == "psycopg":
        from notifier.storage.drivers.psycopg_runner import PsycopgRunner

        runner: SyncRunner | None = PsycopgRunner.of(conn)
        if runner is not None:
            return runner
    if kind == "sqlalchemy":
        from notifier.storage.drivers.sqlalchemy_runner import SQLAlchemyRunner

        runner = SQLAlchemyRunner.of(conn)
        if runner is not None:
            return runner
    raise TypeError(
        f"request_verification_sync takes {SYNC_ACCEPTED}, not {type(conn).__qualname__}"
        + (" (use request_verification for an async connection)" if _is_async(conn) else "")
    )


def _is_async(conn: object) -> bool:
    return _kind(conn) == "asyncpg" or type(conn).__name__.startswith("Async")
