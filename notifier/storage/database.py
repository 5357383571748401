"""Database access: which server to use, and connections configured the way notifier needs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg

from notifier.config import DatabaseSettings
from notifier.errors import DatabaseUnavailable
from notifier.storage.connection import Connection
from notifier.storage.embedded import embedded_url
from notifier.storage.queries import sql

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
    """Where a URL points, without its credentials: host[:port][,host[:port]...]/database."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    hosts = parts.netloc.rpartition("@")[2]  # "h1:p1,h2:p2" for a multi-host URL
    if "host" in query:  # a socket directory (or host list) given as a parameter
        ports = f":{query['port'][0]}" if "port" in query else ""
        hosts = query["host"][0] + ports
    return f"{hosts or 'localhost'}{parts.path or '/'}"


# What failing to reach PostgreSQL looks like: refused, no such socket or host, timed out,
# a server that is starting up or shutting down, or (during a failover) no host of a
# multi-host URL that accepts writes yet.
UNREACHABLE = (
    OSError,
    TimeoutError,
    asyncpg.CannotConnectNowError,
    asyncpg.PostgresConnectionError,
    asyncpg.TargetServerAttributeNotMatched,
)

# asyncpg's own default: the statements a connection keeps prepared.
DEFAULT_STATEMENT_CACHE_SIZE = 100
# For connections that run a few statements once (start-up checks, stats, cleanup): caching
# saves nothing there, and without named statements they work through any pooler.
ONE_SHOT_CACHE = 0

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


async def connect(
    url: str, *, statement_cache_size: int = DEFAULT_STATEMENT_CACHE_SIZE, **kwargs: Any
) -> asyncpg.Connection:
    """A single connection outside any pool (migrations, the LISTEN connection)."""
    try:
        conn = await asyncpg.connect(
            url,
            timeout=CONNECT_TIMEOUT_SECONDS,
            statement_cache_size=statement_cache_size,
            **kwargs,
        )
    except UNREACHABLE as exc:
        raise DatabaseUnavailable(describe(url), exc) from exc
    return conn


async def init_pool_connection(conn: Connection) -> None:
    """A pool connection's setup: the array types it will use, learnt at once.

    asyncpg learns an array type's codec with a catalogue query the first time a statement
    uses it, and switches JIT off around that query with two session-level settings. Through
    a transaction-mode pooler those land on other server connections: the query runs with
    JIT on (a second or more, stalling whatever waits on it) and the settings leak into the
    pooler's connections. Learnt here inside one transaction that is rolled back, JIT stays
    off for it, nothing leaks, and the codecs stay known to the connection.
    """
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(sql("jit_off_in_transaction"))
        await conn.fetch(sql("learn_array_types"))
    finally:
        await transaction.rollback()


# Statements are batched, so a worker needs few connections: claims, the pre-send gate,
# completions, lease renewal and the retry timer each use at most one at a time.
POOL_MAX_SIZE = 10


async def _keep_session(conn: Connection) -> None:
    """Pool release without asyncpg's reset query (RESET ALL, UNLISTEN *, ...).

    That query is a round trip on every release, doubling the cost of each statement.
    notifier's pool connections never keep session state: transactions are closed (asyncpg
    still rolls back one left open), nothing LISTENs on them, no setting is changed, and the
    only advisory lock taken (maintenance) is transaction-scoped.
    """


async def create_pool(
    url: str,
    max_size: int = POOL_MAX_SIZE,
    *,
    statement_cache_size: int = DEFAULT_STATEMENT_CACHE_SIZE,
) -> asyncpg.Pool:
    """The pool every runtime statement goes through (the LISTEN connection stays outside).

    Nothing run on it keeps session state beyond one transaction, so it may go through a
    transaction-mode pooler (with `statement_cache_size` 0 before PgBouncer 1.21).
    """
    try:
        return await asyncpg.create_pool(
            url,
            min_size=1,
            max_size=max_size,
            init=init_pool_connection,
            reset=_keep_session,
            statement_cache_size=statement_cache_size,
            timeout=CONNECT_TIMEOUT_SECONDS,
            server_settings={"application_name": "notifier"},
        )
    except UNREACHABLE as exc:
        raise DatabaseUnavailable(describe(url), exc) from exc
