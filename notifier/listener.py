"""The LISTEN connection: one dedicated connection, checked by round trips, reconnected on loss.

Notifications sent while nobody listens are gone, so every (re)connection is followed by a
sweep: connect -> LISTEN -> sweep -> notifications (PostgreSQL registers the listener before
LISTEN commits, so nothing committed after that point is missed).
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

from notifier.database import connect
from notifier.queries import sql
from notifier.signals import Signals

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
# Keep the server noticing a vanished client (half-open TCP) within about a minute.
LISTENER_SERVER_SETTINGS = {
    "application_name": "notifier-listener",
    "tcp_keepalives_idle": "30",
    "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "3",
}


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


class Listener:
    """Owns the LISTEN connection for as long as `run()` runs.

    Ids from notifications go to `on_ids`; `on_connected` runs after every successful LISTEN
    (the worker sweeps then). A periodic self-notification round trip on the channel catches
    a connection that died silently (half-open TCP, a pooler that swallowed LISTEN); a lost
    or silent connection is logged loudly, dropped, and replaced with backoff.
    """

    def __init__(
        self,
        url: str,
        on_ids: Callable[[list[int]], None],
        on_connected: Callable[[], None],
        signals: Signals,
        check_interval: float,
        check_timeout: float,
    ) -> None:
        self.url = url
        self.on_ids = on_ids
        self.on_connected = on_connected
        self.signals = signals
        self.check_interval = check_interval
        self.check_timeout = check_timeout
        self.connection: Any = None
        self.reconnects = 0
        self._malformed = 0
        self._ping_nonce: str | None = None
        self._pong: anyio.Event | None = None
        self._started = False

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; `task_status.started()` follows the first LISTEN."""
        failures = 0
        while True:
            try:
                conn = await connect(self.url, server_settings=LISTENER_SERVER_SETTINGS)
            except Exception as exc:
                failures += 1
                delay = self._backoff(failures)
                log.warning("listener cannot connect (%s); retrying in %.2fs", exc, delay)
                self.signals.emit("listener_connect_failed", error=str(exc))
                await anyio.sleep(delay)
                continue
            failures = 0
            try:
                reason = await self._listen(conn, task_status)
            except Exception as exc:
                # The health check runs in a task group: show what failed, not the group.
                cause: BaseException = exc
                while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
                    cause = cause.exceptions[0]
                reason = f"{type(cause).__name__}: {cause}"
            finally:
                self.connection = None
                conn.terminate()
            self.reconnects += 1
            log.error("LISTEN connection lost (%s): reconnecting, then sweeping", reason)
            self.signals.emit("listener_lost", reason=reason)
            await anyio.sleep(self._backoff(1))

    async def _listen(self, conn: Any, task_status: TaskStatus[None]) -> str:
        """LISTEN on `conn` and watch it; returns why it stopped being trustworthy."""
        lost = anyio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        await conn.add_listener(CHANNEL, self._on_notification)
        self.connection = conn
        self.on_connected()
        self.signals.emit("listener_connected", pid=conn.get_server_pid())
        if not self._started:
            self._started = True
            task_status.started()
        reason = "connection closed"
        async with anyio.create_task_group() as tg:

            async def check_health() -> None:
                nonlocal reason
                while True:
                    await anyio.sleep(self.check_interval)
                    if not await self._round_trip(conn):
                        reason = (
                            "no self-notification came back within "
                            f"{self.check_timeout:g}s (dead connection, or a pooler dropped LISTEN)"
                        )
                        lost.set()
                        return

            tg.start_soon(check_health)
            await lost.wait()
            tg.cancel_scope.cancel()
        return reason

    async def _round_trip(self, conn: Any) -> bool:
        """NOTIFY ourselves on the channel and see it arrive, within the timeout."""
        self._ping_nonce = secrets.token_hex(8)
        self._pong = anyio.Event()
        payload = orjson.dumps({"v": PAYLOAD_VERSION, "ping": self._ping_nonce}).decode()
        with anyio.move_on_after(self.check_timeout):
            await conn.execute(sql("notify"), CHANNEL, payload)
            await self._pong.wait()
            self.signals.emit("listener_checked")
            return True
        return False

    def _on_notification(self, conn: Any, pid: int, channel: str, payload: str) -> None:
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
            self.signals.emit("malformed_payload", pid=pid)

    @staticmethod
    def _backoff(failures: int) -> float:
        exponent = min(failures - 1, 16)
        nominal = min(RECONNECT_CAP_SECONDS, RECONNECT_FIRST_SECONDS * 2.0**exponent)
        return nominal * random.uniform(0.5, 1.0)
