"""Database access: which server to use, and connections configured the way notifier needs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg

from notifier.config import DatabaseSettings
from notifier.embedded import embedded_url
from notifier.errors import DatabaseUnavailable

# Seconds to wait for a connection before reporting the database unreachable.
CONNECT_TIMEOUT_SECONDS = 10.0


@contextlib.contextmanager
def database_url(settings: DatabaseSettings) -> Iterator[str]:
    """The configured server's URL, or the embedded server's for as long as the block runs
    (started for it, or the one the process that owns the data directory runs)."""
    if settings.url is not None:
        yield settings.url
        return
    with embedded_url(settings.data_dir) as url:
        yield url


def describe(url: str) -> str:
    """Where a URL points, without its credentials: host[:port]/database."""
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or "localhost"])[0]
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}{parts.path or '/'}"


# What failing to reach PostgreSQL looks like: refused, no such socket or host, timed out,
# or a server that is starting up or shutting down.
UNREACHABLE = (
    OSError,
    TimeoutError,
    asyncpg.CannotConnectNowError,
    asyncpg.PostgresConnectionError,
)


# What a database that went away looks like to a statement on a pooled connection: the
# request never got an answer, so it is worth retrying (an HTTP request answers 503).
UNREACHABLE_MIDWAY: tuple[type[Exception], ...] = (
    *UNREACHABLE,
    asyncpg.InterfaceError,
    # What asyncpg raises, about half the time, for a pooled connection the server has just
    # closed (restart, failover, idle killer): the request never reached the server.
    asyncpg.InternalClientError,
)


# A role without the privilege a statement needs (say, the runtime role running `keys`).
PERMISSION_DENIED: tuple[type[Exception], ...] = (asyncpg.InsufficientPrivilegeError,)


async def connect(url: str, **kwargs: Any) -> asyncpg.Connection:
    """A single connection outside any pool (migrations, the LISTEN connection)."""
    try:
        conn = await asyncpg.connect(url, timeout=CONNECT_TIMEOUT_SECONDS, **kwargs)
    except UNREACHABLE as exc:
        raise DatabaseUnavailable(describe(url), exc) from exc
    return conn


# Statements are batched, so a worker needs few connections: claims, the pre-send gate,
# completions, lease renewal and the retry timer each use at most one at a time.
POOL_MAX_SIZE = 10


async def _keep_session(conn: Any) -> None:
    """Pool release without asyncpg's reset query (RESET ALL, UNLISTEN *, ...).

    That query is a round trip on every release, doubling the cost of each statement.
    notifier's pool connections never keep session state: transactions are closed (asyncpg
    still rolls back one left open), nothing LISTENs on them, no setting is changed, and the
    one session-level advisory lock (maintenance) is released before the connection is.
    """


async def create_pool(url: str, max_size: int = POOL_MAX_SIZE) -> asyncpg.Pool:
    """The pool every runtime statement goes through (the LISTEN connection stays outside)."""
    try:
        return await asyncpg.create_pool(
            url,
            min_size=1,
            max_size=max_size,
            reset=_keep_session,
            timeout=CONNECT_TIMEOUT_SECONDS,
            server_settings={"application_name": "notifier"},
        )
    except UNREACHABLE as exc:
        raise DatabaseUnavailable(describe(url), exc) from exc
