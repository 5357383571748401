"""The LISTEN connection: one dedicated connection, checked by round trips, reconnected on loss.

Notifications sent while nobody listens are gone, so every (re)connection is followed by a
sweep: connect -> LISTEN -> sweep -> notifications (PostgreSQL registers the listener before
LISTEN commits, so nothing committed after that point is missed).

The round trip's NOTIFY goes through the pool, never the LISTEN connection itself: through
PgBouncer in transaction mode a session hears its own NOTIFY (it runs on the server
connection that ran LISTEN) while every other session's is dropped, so only a notification
from another connection proves that the LISTEN connection hears the database.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections.abc import Callable
from typing import Any

import anyio
import orjson
from anyio.abc import TaskStatus

from notifier import events
from notifier.errors import DatabaseUnavailable
from notifier.events import Observer
from notifier.storage.connection import Listening, Pool
from notifier.storage.database import connect, describe
from notifier.storage.queries import sql

log = logging.getLogger(__name__)

CHANNEL = "notifier_outbox_v1"
PAYLOAD_VERSION = 1
# Reconnect backoff: first retry after this many seconds, doubling up to the cap, jittered.
RECONNECT_FIRST_SECONDS = 0.1
RECONNECT_CAP_SECONDS = 10.0
# Ids accepted from one payload; the trigger sends at most 300.
MAX_IDS_PER_PAYLOAD = 1000
# Malformed payloads are logged once, then every this many, so a flood cannot flood the log.
MALFORMED_LOG_EVERY = 100
LISTENER_APPLICATION_NAME = "notifier-listener"
# Keep the server noticing a vanished client (half-open TCP) within about a minute.
KEEPALIVE_SETTINGS = {
    "tcp_keepalives_idle": "30",
    "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "3",
}
# How PgBouncer refuses a startup parameter it does not pass on (protocol violation 08P01).
REFUSED_STARTUP_PARAMETER = "unsupported startup parameter"
# Said whenever the connection hears nothing, since the likeliest cause is a pooler.
POOLER_HINT = (
    "LISTEN needs a database session of its own: if NOTIFIER_LISTEN_DATABASE_URL (default "
    "NOTIFIER_DATABASE_URL) goes through PgBouncer or another pooler in transaction or "
    "statement mode, notifications never arrive; point NOTIFIER_LISTEN_DATABASE_URL at the "
    "database directly or at a session-mode pool. Until then only the sweep delivers"
)


def parse_payload(payload: str) -> list[int] | str | None:
    """Ids from a payload, the nonce of a ping, or None for anything malformed or foreign."""
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("v") != PAYLOAD_VERSION:
        return None
    ping = data.get("ping")
    if isinstance(ping, str):
        return ping
    ids = data.get("ids")
    if (
        not isinstance(ids, list)
        or not 0 < len(ids) <= MAX_IDS_PER_PAYLOAD
        or not all(type(i) is int and i > 0 for i in ids)
    ):
        return None
    return ids


def _ignoring_payload(callback: Callable[[], None]) -> Callable[[object, int, str, str], None]:
    def on_notification(conn: object, pid: int, channel: str, payload: str) -> None:
        callback()

    return on_notification


class Listener:
    """Owns the LISTEN connection for as long as `run()` runs.

    Ids from notifications go to `on_ids`; `on_connected` runs after every successful LISTEN
    (the worker sweeps then). A self-notification round trip, sent through `pool` at once
    after LISTEN and then every `check_interval`, catches a connection that hears nothing
    (half-open TCP, a transaction-mode pooler); a lost or silent connection is logged
    loudly, dropped, and replaced with backoff.
    """

    def __init__(
        self,
        url: str,
        pool: Pool,
        on_ids: Callable[[list[int]], None],
        on_connected: Callable[[], None],
        observer: Observer,
        check_interval: float,
        check_timeout: float,
    ) -> None:
        self.url = url
        self.pool = pool
        self.on_ids = on_ids
        self.on_connected = on_connected
        self.observer = observer
        self.check_interval = check_interval
        self.check_timeout = check_timeout
        self.connection: Listening | None = None
        self.reconnects = 0
        self._malformed = 0
        self._ping_nonce: str | None = None
        self._pong: anyio.Event | None = None
        self._started = False
        # Cleared when the server refuses the keepalive settings (PgBouncer does).
        self._keepalives = True
        # Other channels heard on the same connection: each one's callback runs on every
        # notification, and after every (re)connection (what was missed meanwhile).
        self._also: dict[str, Callable[[], None]] = {}

    def also_listen(self, channel: str, on_notification: Callable[[], None]) -> None:
        """Listen on `channel` too (before `run()`), calling `on_notification` for each
        notification on it and after every LISTEN, whatever its payload."""
        self._also[channel] = on_notification

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; `task_status.started()` follows the first LISTEN."""
        failures = 0
        while True:
            try:
                conn = await self._connect()
            except Exception as exc:
                failures += 1
                delay = self._backoff(failures)
                log.warning("listener cannot connect (%s); retrying in %.2fs", exc, delay)
                self.observer.notice(events.ListenerConnectFailed(str(exc)))
                await anyio.sleep(delay)
                continue
            heard = False
            try:
                heard, reason = await self._listen(conn, task_status)
            except Exception as exc:
                # The health check runs in a task group: show what failed, not the group.
                cause: BaseException = exc
                while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
                    cause = cause.exceptions[0]
                reason = f"{type(cause).__name__}: {cause}"
            finally:
                self.connection = None
                conn.terminate()
            # A connection that never passed a check (a pooler that drops LISTEN) is not a
            # recovery: back off further each time rather than reconnect in a tight loop.
            failures = 0 if heard else failures + 1
            self.reconnects += 1
            log.error("LISTEN connection lost (%s): reconnecting, then sweeping", reason)
            self.observer.notice(events.ListenerLost(reason, heard))
            await anyio.sleep(self._backoff(max(failures, 1)))

    async def _connect(self) -> Any:
        # Nothing is worth preparing on this connection, and through a transaction-mode
        # pooler (a mistake the round trip reports) a prepared statement would break.
        settings = {"application_name": LISTENER_APPLICATION_NAME}
        if self._keepalives:
            try:
                return await connect(
                    self.url,
                    statement_cache_size=0,
                    server_settings={**settings, **KEEPALIVE_SETTINGS},
                )
            except DatabaseUnavailable as exc:
                if REFUSED_STARTUP_PARAMETER not in str(exc.__cause__):
                    raise
            self._keepalives = False
            log.info(
                "the LISTEN connection's server refused TCP keepalive settings (a pooler such "
                "as PgBouncer); connecting without them: the pooler keeps its own keepalives"
            )
        return await connect(self.url, statement_cache_size=0, server_settings=settings)

    async def _listen(self, conn: Listening, task_status: TaskStatus[None]) -> tuple[bool, str]:
        """LISTEN on `conn` and watch it; returns whether any round trip passed on it, and
        why it stopped being trustworthy."""
        lost = anyio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        await conn.add_listener(CHANNEL, self._on_notification)
        for channel, callback in self._also.items():
            await conn.add_listener(channel, _ignoring_payload(callback))
        self.connection = conn
        server = await conn.fetchrow(sql("server_address"))
        self.on_connected()
        for callback in self._also.values():
            callback()
        where = f"{server['host']}:{server['port']}" if server["host"] else describe(self.url)
        log.info(
            "listening on %s (server backend %d); sweeping for rows committed while not listening",
            where,
            server["pid"],
        )
        self.observer.notice(events.ListenerConnected(conn.get_server_pid(), where))
        if not self._started:
            self._started = True
            task_status.started()
        reason = "connection closed"
        heard = False
        async with anyio.create_task_group() as tg:

            async def check_health() -> None:
                nonlocal reason, heard
                while True:
                    passed = await self._round_trip()
                    if passed is False:
                        reason = (
                            "no self-notification came back within "
                            f"{self.check_timeout:g}s (a dead connection, or a pooler that "
                            "dropped LISTEN)"
                            if heard
                            else "it hears nothing: a self-notification sent through the pool "
                            f"did not arrive within {self.check_timeout:g}s of LISTEN. "
                            + POOLER_HINT
                        )
                        lost.set()
                        return
                    heard = heard or passed is True
                    await anyio.sleep(self.check_interval)

            tg.start_soon(check_health)
            await lost.wait()
            tg.cancel_scope.cancel()
        return heard, reason

    async def _round_trip(self) -> bool | None:
        """NOTIFY through the pool and see it arrive here, within the timeout.

        None when the NOTIFY itself failed (the pool cannot reach the database): that says
        nothing about this connection, which its termination callback watches meanwhile.
        """
        self._ping_nonce = secrets.token_hex(8)
        self._pong = anyio.Event()
        payload = orjson.dumps({"v": PAYLOAD_VERSION, "ping": self._ping_nonce}).decode()
        with anyio.move_on_after(self.check_timeout):
            try:
                await self.pool.execute(sql("notify"), CHANNEL, payload)
            except Exception as exc:
                log.warning("cannot check the LISTEN connection: the NOTIFY failed (%s)", exc)
                self.observer.notice(events.ListenerCheckSkipped(str(exc)))
                return None
            await self._pong.wait()
            self.observer.notice(events.ListenerChecked())
            return True
        return False

    def _on_notification(self, conn: object, pid: int, channel: str, payload: str) -> None:
        parsed = parse_payload(payload)
        if isinstance(parsed, list):
            self.on_ids(parsed)
        elif isinstance(parsed, str):
            if parsed == self._ping_nonce and self._pong is not None:
                self._pong.set()
        else:
            self._malformed += 1
            if self._malformed % MALFORMED_LOG_EVERY == 1:
                log.warning(
                    "ignoring a malformed or foreign payload on %s from backend %s "
                    "(%d so far): %.200r",
                    channel,
                    pid,
                    self._malformed,
                    payload,
                )
            self.observer.notice(events.MalformedPayload(pid))

    @staticmethod
    def _backoff(failures: int) -> float:
        exponent = min(failures - 1, 16)
        nominal = min(RECONNECT_CAP_SECONDS, RECONNECT_FIRST_SECONDS * 2.0**exponent)
        return nominal * random.uniform(0.5, 1.0)
