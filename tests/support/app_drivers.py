"""An application's own connection on each driver notifier's library call joins, driven the
way an app drives it: begin (or not), its own statement, the request, commit or rollback.

Every driver is given the same async face (`AppConnection`), so one contract suite runs over
all of them. Sync drivers run on a thread of their own (Django's connection may only be
used by the thread that opened it), never on the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, urlsplit

import asyncpg
import psycopg
import sqlalchemy
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import notifier
from notifier.verifications import CodeCheck, VerificationResult

T = TypeVar("T")
# What an app's own work in the signup transaction writes (a table the tests create).
OWN_TABLE = "app_signups"
CREATE_OWN_TABLE = f"CREATE TABLE IF NOT EXISTS {OWN_TABLE} (user_id text)"


def own_insert(user_id: str) -> str:
    """The app's own statement (a literal: every driver has its own paramstyle)."""
    assert user_id.replace("-", "").isalnum()
    return f"INSERT INTO {OWN_TABLE} (user_id) VALUES ('{user_id}')"


class AppConnection(Protocol):
    """One application connection, whatever its driver."""

    async def begin(self) -> None:
        """Open the app's transaction (as the driver's users do; some begin implicitly)."""

    async def execute(self, statement: str) -> None:
        """The app's own work."""

    async def request(self, **fields: Any) -> VerificationResult:
        """notifier's library call on this connection, inside whatever is open."""

    async def commit(self) -> None: ...

    async def rollback(self) -> None: ...

    async def request_in_autocommit(self, **fields: Any) -> VerificationResult:
        """The library call on this connection switched to autocommit, outside any
        transaction (which it must refuse)."""

    async def confirm_code(self, verification_id: uuid.UUID, code: str, policy: Any) -> CodeCheck:
        """notifier's code confirmation on this connection, inside whatever is open (it must
        refuse a transaction)."""

    async def confirm_code_in_autocommit(
        self, verification_id: uuid.UUID, code: str, policy: Any
    ) -> CodeCheck:
        """The code confirmation on this connection switched to autocommit."""

    async def close(self) -> None: ...


# -- async drivers ---------------------------------------------------------------------------


class AsyncpgApp:
    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self._tx: Any = None

    async def begin(self) -> None:
        self._tx = self.conn.transaction()
        await self._tx.start()

    async def execute(self, statement: str) -> None:
        await self.conn.execute(statement)

    async def request(self, **fields: Any) -> VerificationResult:
        return await notifier.request_verification(self.conn, **fields)

    async def commit(self) -> None:
        await self._tx.commit()

    async def rollback(self) -> None:
        await self._tx.rollback()

    async def request_in_autocommit(self, **fields: Any) -> VerificationResult:
        return await notifier.request_verification(self.conn, **fields)

    async def confirm_code(self, verification_id: uuid.UUID, code: str, policy: Any) -> CodeCheck:
        return await notifier.confirm_code(self.conn, verification_id, code, policy=policy)

    async def confirm_code_in_autocommit(
        self, verification_id: uuid.UUID, code: str, policy: Any
    ) -> CodeCheck:
        return await self.confirm_code(verification_id, code, policy)

    async def close(self) -> None:
        await self.conn.close()


class AsyncPsycopgApp:
    """psycopg's default: no autocommit, a transaction begun by the first statement."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def begin(self) -> None:
        return None

    async def execute(self, statement: str) -> None:
        await self.conn.execute(statement)

    async def request(self, **fields: Any) -> VerificationResult:
        return await notifier.request_verification(self.conn, **fields)

    async def commit(self) -> None:
        await self.conn.commit()

    async def rollback(self) -> None:
        await self.conn.rollback()

    async def request_in_autocommit(self, **fields: Any) -> VerificationResult:
        await self.conn.set_autocommit(True)
        return await notifier.request_verification(self.conn, **fields)

    async def confirm_code(self, verification_id: uuid.UUID, code: str, policy: Any) -> CodeCheck:
        return await notifier.confirm_code(self.conn, verification_id, code, policy=policy)

    async def confirm_code_in_autocommit(
        self, verification_id: uuid.UUID, code: str, policy: Any
    ) -> CodeCheck:
        await self.conn.set_autocommit(True)
        return await self.confirm_code(verification_id, code, policy)

    async def close(self) -> None:
        await self.conn.close()


class AsyncSQLAlchemyApp:
    """A Core AsyncConnection, or an ORM AsyncSession (`session=True`)."""

    def __init__(self, url: str, driver: str, session: bool) -> None:
        self.engine = create_async_engine(_sqlalchemy_url(url, driver))
        self.session = session
        self.handle: Any = None

    async def _open(self, engine: Any) -> None:
        self.handle = AsyncSession(engine) if self.session else await engine.connect()

    async def begin(self) -> None:
        if self.handle is None:
            await self._open(self.engine)
        await self.handle.begin()

    async def execute(self, statement: str) -> None:
        await self.handle.execute(sqlalchemy.text(statement))

    async def request(self, **fields: Any) -> VerificationResult:
        return await notifier.request_verification(self.handle, **fields)

    async def commit(self) -> None:
        await self.handle.commit()

    async def rollback(self) -> None:
        await self.handle.rollback()

    async def request_in_autocommit(self, **fields: Any) -> VerificationResult:
        await self._open(self.engine.execution_options(isolation_level="AUTOCOMMIT"))
        return await notifier.request_verification(self.handle, **fields)

    async def confirm_code(self, verification_id: uuid.UUID, code: str, policy: Any) -> CodeCheck:
        return await notifier.confirm_code(self.handle, verification_id, code, policy=policy)

    async def confirm_code_in_autocommit(
        self, verification_id: uuid.UUID, code: str, policy: Any
    ) -> CodeCheck:
        if self.handle is not None:
            await self.handle.close()
        await self._open(self.engine.execution_options(isolation_level="AUTOCOMMIT"))
        return await self.confirm_code(verification_id, code, policy)

    async def close(self) -> None:
        if self.handle is not None:
            await self.handle.close()
        await self.engine.dispose()


# -- sync drivers, each on a thread of its own -----------------------------------------------


class _OwnThread:
    """Runs a sync driver's calls, one at a time, on the one thread that owns it."""

    def __init__(self) -> None:
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    async def run(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(call, *args, **kwargs))

    def shutdown(self) -> None:
        self._thread.shutdown(wait=True)


class PsycopgApp:
    def __init__(self, url: str) -> None:
        self.url = url
        self.thread = _OwnThread()
        self.conn: psycopg.Connection[Any] | None = None

    async def open(self) -> None:
        self.conn = await self.thread.run(psycopg.connect, self.url)

    async def begin(self) -> None:
        return None

    async def execute(self, statement: str) -> None:
        assert self.conn is not None
        await self.thread.run(self.conn.execute, statement)

    async def request(self, **fields: Any) -> VerificationResult:
        return await self.thread.run(notifier.request_verification_sync, self.conn, **fields)

    async def commit(self) -> None:
        assert self.conn is not None
        await self.thread.run(self.conn.commit)

    async def rollback(self) -> None:
        assert self.conn is not None
        await self.thread.run(self.conn.rollback)

    async def request_in_autocommit(self, **fields: Any) -> VerificationResult:
        assert self.conn is not None
        await self.thread.run(setattr, self.conn, "autocommit", True)
        return await self.request(**fields)

    async def confirm_code(self, verification_id: uuid.UUID, code: str, policy: Any) -> CodeCheck:
        return await self.thread.run(
            notifier.confirm_code_sync, self.conn, verification_id, code, policy=policy
        )

    async def confirm_code_in_autocommit(
        self, verification_id: uuid.UUID, code: str, policy: Any
    ) -> CodeCheck:
        assert self.conn is not None
        await self.thread.run(setattr, self.conn, "autocommit", True)
        return await self.confirm_code(verification_id, code, policy)

    async def close(self) -> None:
        if self.conn is not None:
            await self.thread.run(self.conn.close)
        self.thread.shutdown()


class SQLAlchemyApp:
    """A Core Connection, or an ORM Session (`session=True`), on psycopg or psycopg2."""

    def __init__(self, url: str, driver: str, session: bool) -> None:
        self.engine = sqlalchemy.create_engine(_sqlalchemy_url(url, driver))
        self.session = session
        self.thread = _OwnThread()
        self.handle: Any = None

    def _open(self, engine: Any) -> None:
        self.handle = Session(engine) if self.session else engine.connect()

    async def begin(self) -> None:
        def begin() -> None:
            if self.handle is None:
                self._open(self.engine)
            self.handle.begin()

        await self.thread.run(begin)

    async def execute(self, statement: str) -> None:
        await self.thread.run(lambda: self.handle.execute(sqlalchemy.text(statement)))

    async def request(self, **fields: Any) -> VerificationResult:
        return await self.thread.run(notifier.request_verification_sync, self.handle, **fields)

    async def commit(self) -> None:
        await self.thread.run(lambda: self.handle.commit())

    async def rollback(self) -> None:
        await self.thread.run(lambda: self.handle.rollback())

    async def request_in_autocommit(self, **fields: Any) -> VerificationResult:
        engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        await self.thread.run(self._open, engine)
        return await self.request(**fields)

    async def confirm_code(self, verification_id: uuid.UUID, code: str, policy: Any) -> CodeCheck:
        return await self.thread.run(
            notifier.confirm_code_sync, self.handle, verification_id, code, policy=policy
        )

    async def confirm_code_in_autocommit(
        self, verification_id: uuid.UUID, code: str, policy: Any
    ) -> CodeCheck:
        if self.handle is not None:
            await self.thread.run(self.handle.close)
        engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        await self.thread.run(self._open, engine)
        return await self.confirm_code(verification_id, code, policy)

    async def close(self) -> None:
        if self.handle is not None:
            await self.thread.run(self.handle.close)
        await self.thread.run(self.engine.dispose)
        self.thread.shutdown()


class DjangoApp:
    """Django's connection under an alias of this test's own, its work inside `atomic()`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.alias = f"test_{uuid.uuid4().hex[:8]}"
        self.thread = _OwnThread()
        self._atomic: Any = None

    async def open(self) -> None:
        await self.thread.run(_add_django_database, self.alias, self.url)

    async def begin(self) -> None:
        from django.db import transaction

        def begin() -> None:
            self._atomic = transaction.atomic(using=self.alias)
            self._atomic.__enter__()

        await self.thread.run(begin)

    async def execute(self, statement: str) -> None:
        from django.db import connections

        def execute() -> None:
            with connections[self.alias].cursor() as cursor:
                cursor.execute(statement)

        await self.thread.run(execute)

    async def request(self, **fields: Any) -> VerificationResult:
        from notifier.contrib.django import request_verification

        return await self.thread.run(
            functools.partial(request_verification, using=self.alias), **fields
        )

    async def commit(self) -> None:
        await self.thread.run(self._atomic.__exit__, None, None, None)

    async def rollback(self) -> None:
        def rollback() -> None:
            failure = RuntimeError("rolled back by the test")
            self._atomic.__exit__(RuntimeError, failure, None)

        await self.thread.run(rollback)

    async def request_in_autocommit(self, **fields: Any) -> VerificationResult:
        return await self.request(**fields)

    async def confirm_code(self, verification_id: uuid.UUID, code: str, policy: Any) -> CodeCheck:
        from notifier.contrib.django import confirm_code

        return await self.thread.run(
            functools.partial(confirm_code, using=self.alias, policy=policy), verification_id, code
        )

    async def confirm_code_in_autocommit(
        self, verification_id: uuid.UUID, code: str, policy: Any
    ) -> CodeCheck:
        return await self.confirm_code(verification_id, code, policy)

    async def close(self) -> None:
        from django.db import connections

        def close() -> None:
            connections[self.alias].close()
            del connections.settings[self.alias]

        await self.thread.run(close)
        self.thread.shutdown()


_DJANGO_SETUP = threading.Lock()


def _add_django_database(alias: str, url: str) -> None:
    import django
    from django.conf import settings
    from django.db import connections

    with _DJANGO_SETUP:  # threads of one process may ask at once (the benchmark's)
        if not settings.configured:
            settings.configure(DATABASES={}, USE_TZ=True)
            django.setup()
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    options = {"passfile": query["passfile"]} if "passfile" in query else {}
    configured = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "postgres",
        "HOST": query.get("host") or parts.hostname or "",
        "PORT": query.get("port") or str(parts.port or ""),
        "OPTIONS": options,
    }
    # configure_settings fills in Django's defaults (and insists on a "default" alias).
    normalised = connections.configure_settings({"default": dict(configured), alias: configured})
    connections.settings[alias] = normalised[alias]


def _sqlalchemy_url(url: str, driver: str) -> str:
    return url.replace("postgresql://", f"postgresql+{driver}://", 1)


# -- the drivers the suite runs over --------------------------------------------------------


@dataclass(frozen=True)
class Driver:
    name: str
    open: Callable[[str], Any]  # url -> an awaitable AppConnection

    def __str__(self) -> str:
        return self.name


async def _asyncpg(url: str) -> AppConnection:
    return AsyncpgApp(await asyncpg.connect(url))


async def _async_psycopg(url: str) -> AppConnection:
    return AsyncPsycopgApp(await psycopg.AsyncConnection.connect(url))


async def _psycopg(url: str) -> AppConnection:
    app = PsycopgApp(url)
    await app.open()
    return app


async def _django(url: str) -> AppConnection:
    app = DjangoApp(url)
    await app.open()
    return app


def _async_sqlalchemy(driver: str, session: bool) -> Callable[[str], Any]:
    async def open_(url: str) -> AppConnection:
        return AsyncSQLAlchemyApp(url, driver, session)

    return open_


def _sqlalchemy(driver: str, session: bool) -> Callable[[str], Any]:
    async def open_(url: str) -> AppConnection:
        return SQLAlchemyApp(url, driver, session)

    return open_


DRIVERS = (
    Driver("asyncpg", _asyncpg),
    Driver("psycopg async", _async_psycopg),
    Driver("psycopg", _psycopg),
    # SQLAlchemy: each object an app may hold, on each dialect it may run on.
    Driver("SQLAlchemy AsyncConnection, asyncpg", _async_sqlalchemy("asyncpg", False)),
    Driver("SQLAlchemy AsyncConnection, psycopg", _async_sqlalchemy("psycopg", False)),
    Driver("SQLAlchemy AsyncSession, asyncpg", _async_sqlalchemy("asyncpg", True)),
    Driver("SQLAlchemy AsyncSession, psycopg", _async_sqlalchemy("psycopg", True)),
    Driver("SQLAlchemy Connection, psycopg", _sqlalchemy("psycopg", False)),
    Driver("SQLAlchemy Connection, psycopg2", _sqlalchemy("psycopg2", False)),
    Driver("SQLAlchemy Session, psycopg", _sqlalchemy("psycopg", True)),
    Driver("SQLAlchemy Session, psycopg2", _sqlalchemy("psycopg2", True)),
    Driver("Django", _django),
)


@contextlib.asynccontextmanager
async def app_connection(driver: Driver, url: str) -> AsyncIterator[AppConnection]:
    """An application connection of `driver` to `url`, closed on exit."""
    app: AppConnection = await driver.open(url)
    try:
        yield app
    finally:
        with contextlib.suppress(Exception):
            await app.rollback()
        await app.close()
