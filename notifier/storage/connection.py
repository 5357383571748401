"""What notifier needs of a database connection and a pool: Protocols, the storage wing's edge.

Every signature that takes a connection or a pool says which it needs, not `Any`: a
`Connection` runs statements (one round trip each), a `Pool` runs them on whichever
connection is free and lends one out for a transaction, a `Listening` connection is the
worker's own for LISTEN. asyncpg's connections and pools are what the package passes today
(storage.database makes them); the Protocols name only what is used, as PgQueuer's driver
port does, so a test or another driver supplies the same shape.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol


class Transaction(Protocol):
    """A transaction begun on a connection: used as `async with conn.transaction():`, or
    started and ended by hand."""

    async def start(self) -> None: ...

    async def commit(self) -> None: ...

    async def rollback(self) -> None: ...

    async def __aenter__(self) -> Transaction: ...

    async def __aexit__(self, *exc_info: object) -> bool | None: ...


class Runner(Protocol):
    """Runs one statement of the query catalogue (numbered parameters, `$1`...). Rows come
    back as the driver's records, read by column name."""

    async def execute(self, query: str, *args: Any) -> str: ...

    async def fetch(self, query: str, *args: Any) -> list[Any]: ...

    async def fetchrow(self, query: str, *args: Any) -> Any: ...

    async def fetchval(self, query: str, *args: Any) -> Any: ...


class Connection(Runner, Protocol):
    """One session: statements, and transactions on it."""

    def transaction(self, **options: Any) -> Transaction: ...

    async def close(self) -> None: ...


class Listening(Connection, Protocol):
    """A session of its own that LISTENs (the worker's listener), and notices its end."""

    async def add_listener(self, channel: str, callback: Callable[..., None]) -> None: ...

    def add_termination_listener(self, callback: Callable[..., None]) -> None: ...

    def get_server_pid(self) -> int: ...

    def is_closed(self) -> bool: ...

    def terminate(self) -> None: ...


class Pool(Runner, Protocol):
    """Connections shared by a process: each statement runs on whichever is free, and
    `acquire()` lends one for a transaction (or a run of statements)."""

    def acquire(
        self, *, timeout: float | None = None
    ) -> AbstractAsyncContextManager[Connection]: ...

    async def close(self) -> None: ...
