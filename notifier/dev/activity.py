"""What `notifier dev` prints as it works: one short line for each step a verification takes.

A newcomer sends a request and wants to see it go through without reading logs. Two
existing sources already say every step, and this module only listens to them:
- the worker's typed events (an `Observer`): claimed, and each attempt's end with the mail
  server's reply, which no stored event carries;
- the events the database writes (`notifier.events`, named on NOTIFY notifier_events, read
  back from a cursor as the feed reads them): accepted, confirmed, failed with its reason,
  whoever changed the row (the API, a link's page, a bounce).
Addresses are shown redacted, as the logs show them.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
from anyio.abc import TaskStatus
from rich.console import Console
from rich.markup import escape

from notifier import events
from notifier.logs import scrub
from notifier.redact import printable, redact_email
from notifier.storage import event_feed
from notifier.storage.connection import Listening
from notifier.storage.database import connect
from notifier.storage.queries import sql

log = logging.getLogger(__name__)

CHANNEL = "notifier_events"
# The feed never reads past a transaction still open: a notification heard while another one
# was open reads nothing, so the feed is read again this often without one.
POLL_SECONDS = 1.0
# Seconds before a failed feed connection is opened again.
RETRY_SECONDS = 2.0
# The worker often claims a row before the feed has read its request's event: its lines wait
# for the "accepted" line this long at most (seconds), so a person reads the steps in order;
# a verification asked for before dev started has none, and its lines come out after this.
HOLD_SECONDS = 2.0
# Verifications whose "accepted" line printed, remembered (the newest this many).
ANNOUNCED_KEPT = 10_000
# Words of the event types a person wants to see in dev, as the lines name them.
SHOWN = {
    "verification.created": "accepted",
    "verification.confirmed": "confirmed",
    "verification.failed": "failed",
    "verification.expired": "expired",
    "verification.superseded": "superseded",
    "verification.code_locked": "locked",
}
# Wide enough for the longest word above, so the ids line up.
_WORD = max(len(w) for w in (*SHOWN.values(), "claimed", "retrying", "sent"))


def short(verification_id: uuid.UUID | str) -> str:
    """A verification's id as a person can compare it by eye: its first 8 hex digits, the
    start of the id the API answered with."""
    return str(verification_id)[:8]


class Activity:
    """Prints the lines: a worker observer, and a follower of the event feed (`follow`)."""

    def __init__(self, console: Console | None = None) -> None:
        # Soft wrap: a line longer than the terminal wraps as text does, rather than being
        # cut into padded rows (and, when stdout is no terminal, at rich's 80 columns).
        self.console = console or Console(highlight=False, soft_wrap=True)
        # Worker events name the outbox row; the lines name its verification.
        self._verifications: dict[int, uuid.UUID] = {}
        # The last reply to each verification's send, shown again on its failed line.
        self._replies: dict[uuid.UUID, str] = {}
        # How far the event feed was read, so a new connection reads on from there.
        self._cursor = event_feed.START
        self._announced: OrderedDict[uuid.UUID, None] = OrderedDict()
        # Worker lines waiting for their verification's "accepted" line: when each was held,
        # and the line.
        self._held: dict[uuid.UUID, list[tuple[float, _Line]]] = {}

    def line(
        self, word: str, style: str, subject: str, *details: str, clock: str | None = None
    ) -> None:
        """`12:00:01 sent       232b78d6  250 OK`: the words of others escaped."""
        shown = "  ".join(escape(printable(d)) for d in details if d)
        clock = clock or datetime.now().strftime("%H:%M:%S")
        self.console.print(
            f"[dim]{clock}[/] [{style}]{word:<{_WORD}}[/] {escape(subject)}  {shown}".rstrip()
        )

    # -- the worker -------------------------------------------------------------------------

    def notice(self, event: events.WorkerEvent) -> None:
        match event:
            case events.Claimed(id=row, attempt=attempt, verification_id=vid) if vid:
                self._verifications[row] = vid
                self._worker_line(vid, "claimed", "cyan", f"attempt {attempt}")
            case events.Completed(id=row, outcome=outcome, status=status, reply=reply):
                vid = self._verifications.pop(row, None)
                if vid is None:
                    return
                said = scrub(reply or "")
                if outcome == "sent":
                    self._worker_line(vid, "sent", "green", said)
                elif status == "pending":
                    self._worker_line(vid, "retrying", "yellow", outcome, said)
                elif said:
                    self._replies[vid] = said
            case events.StaleCompletion(id=row) | events.Released(id=row):
                self._verifications.pop(row, None)
            case _:
                pass

    def _worker_line(self, vid: uuid.UUID, word: str, style: str, *details: str) -> None:
        """A worker's line: now, or once its verification's "accepted" line has printed."""
        line = _Line(word, style, short(vid), details, datetime.now().strftime("%H:%M:%S"))
        if vid in self._announced:
            line.print(self)
        else:
            self._held.setdefault(vid, []).append((time.monotonic(), line))

    def accepted(self, vid: uuid.UUID, address: str, purpose: str) -> None:
        """The "accepted" line (the address as given: redacted by the caller), then the
        worker's lines that waited for it."""
        self.line(SHOWN["verification.created"], "bold", short(vid), address, purpose)
        self._announced[vid] = None
        while len(self._announced) > ANNOUNCED_KEPT:
            self._announced.popitem(last=False)
        for _, line in self._held.pop(vid, []):
            line.print(self)

    def release_held(self, now: float | None = None) -> None:
        """Print the lines held longer than HOLD_SECONDS: their request's event never came."""
        now = time.monotonic() if now is None else now
        for vid in [v for v, lines in self._held.items() if now - lines[0][0] >= HOLD_SECONDS]:
            for _, line in self._held.pop(vid):
                line.print(self)

    # -- the event feed ---------------------------------------------------------------------

    async def follow(
        self, url: str, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Print each event committed from now on, until cancelled. A failed connection is
        opened again and read on from where it got to: these lines never stop the service."""
        conn: Listening = await connect(url)
        self._cursor = await event_feed.feed_end(conn)
        task_status.started()
        while True:
            try:
                await self._follow_on(conn)
            except Exception as exc:
                log.warning("dev activity lines paused: the event feed failed (%s)", exc)
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.close()
            conn = await self._reconnect(url)

    async def _follow_on(self, conn: Listening) -> None:
        """Read the feed on `conn` as notifications wake it, until it fails."""
        wake = anyio.Event()

        def heard(*_: Any) -> None:
            wake.set()

        await conn.add_listener(CHANNEL, heard)
        while True:
            with anyio.move_on_after(POLL_SECONDS):
                await wake.wait()
            # A notification heard from here on wakes the next wait; what it names is read
            # by the read below or the next.
            wake = anyio.Event()
            for event in await event_feed.events_after(conn, self._cursor, event_feed.MAX_PAGE):
                self._cursor = event.cursor or self._cursor
                await self._tell(conn, event)
            self.release_held()

    async def _reconnect(self, url: str) -> Listening:
        while True:
            await anyio.sleep(RETRY_SECONDS)
            try:
                conn: Listening = await connect(url)
            except Exception as exc:
                log.warning("dev activity lines paused: cannot reach the database (%s)", exc)
                continue
            return conn

    async def _tell(self, conn: Listening, event: event_feed.Event) -> None:
        word = SHOWN.get(event.type)
        vid = event.verification_id
        if word is None or vid is None:
            return
        if event.type == "verification.created":
            # The event is thin (no address); the verification has it.
            row = await conn.fetchrow(sql("verification_status"), vid)
            address = redact_email(row["email"]) if row is not None else ""
            self.accepted(vid, address, str(event.data.get("purpose", "")))
        elif event.type == "verification.failed":
            reason = str(event.data.get("reason", ""))
            self.line(word, "red", short(vid), reason, self._replies.pop(vid, ""))
        else:
            self.line(word, "green" if word == "confirmed" else "yellow", short(vid))


@dataclass(frozen=True, slots=True)
class _Line:
    """A line kept to print later, with the time it happened."""

    word: str
    style: str
    subject: str
    details: tuple[str, ...]
    clock: str

    def print(self, activity: Activity) -> None:
        activity.line(self.word, self.style, self.subject, *self.details, clock=self.clock)


def quiet_logs(level: int = logging.WARNING) -> None:
    """Dev's terminal is read for its activity lines: the service's INFO narration (listeners,
    migrations, and uvicorn's two servers, one per listener, each saying "Started server
    process") is raised to `level`, unless the root logger was asked for DEBUG (--verbose)."""
    if logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        return
    for name in ("notifier", "uvicorn"):
        logger = logging.getLogger(name)
        logger.setLevel(max(level, logger.level))
