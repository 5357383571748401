"""The events the database wrote (schema 0015), read back: the feed an app resumes from a
cursor, a verification's own events, and the lapse sweep that writes verification.expired.

A cursor names a place in commit order, the writing transaction's id and the event's id
(`<tx>-<id>`, opaque to apps). The feed never reads past a transaction still open, so an
event committed later can never land behind a cursor already handed out: no gaps and no
repeats. The price is that an open transaction anywhere in the cluster holds the feed back
until it ends.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio
import anyio.lowlevel
import orjson

from notifier.event_types import event_id
from notifier.storage.connection import Runner
from notifier.storage.queries import sql

log = logging.getLogger(__name__)

MAX_PAGE = 1000
_CURSOR = re.compile(r"^(\d{1,20})-(\d{1,19})$")


@dataclass(frozen=True, slots=True, order=True)
class Cursor:
    tx: int
    id: int

    @classmethod
    def parse(cls, text: str) -> Cursor:
        match = _CURSOR.match(text)
        if match is None or int(match[1]) >= 2**64 or int(match[2]) >= 2**63:
            raise ValueError("a cursor is what a page of events named as its next")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.tx}-{self.id}"


START = Cursor(0, 0)


@dataclass(frozen=True, slots=True)
class Event:
    id: str  # evt_...
    type: str
    occurred_at: datetime
    verification_id: uuid.UUID | None
    data: dict[str, Any]
    # Where a reader that has this event resumes (None: not read from the feed).
    cursor: Cursor | None = None


async def events_after(conn: Runner, cursor: Cursor, limit: int) -> list[Event]:
    """Up to `limit` events after `cursor`, in commit order."""
    rows = await conn.fetch(sql("events_after"), cursor.tx, cursor.id, min(limit, MAX_PAGE))
    return [_event(r, Cursor(int(r["tx"]), r["id"])) for r in rows]


async def feed_end(conn: Runner) -> Cursor:
    """Where a reader that wants only what is committed from now on starts: after the newest
    event. (One a transaction still open writes may sort before it and is then not read:
    right for a live view such as dev's, never for a consumer that must see everything.)"""
    row = await conn.fetchrow(sql("events_end"))
    return START if row is None else Cursor(int(row["tx"]), row["id"])


async def events_of_verification(conn: Runner, verification_id: uuid.UUID) -> list[Event]:
    """A verification's events, oldest first."""
    return [_event(r) for r in await conn.fetch(sql("events_of_verification"), verification_id)]


async def mark_lapsed(conn: Runner, batch: int) -> int:
    """Mark up to `batch` links that expired unconfirmed as lapsed (their
    verification.expired events); how many."""
    return int(await conn.fetchval(sql("mark_lapsed"), batch))


async def run_lapse_sweeps(conn: Runner, interval: float, batch: int) -> None:
    """A worker's look for lapsed links every `interval` seconds, batch after batch while
    there are more; any number of workers may run it at once (SKIP LOCKED)."""
    while True:
        try:
            while await mark_lapsed(conn, batch) >= batch:
                await anyio.lowlevel.checkpoint()
        except Exception as exc:
            log.warning("could not look for lapsed links (%s); will retry", exc)
        await anyio.sleep(interval)


def _event(row: Any, cursor: Cursor | None = None) -> Event:
    return Event(
        event_id(row["uid"]),
        row["type"],
        row["occurred_at"],
        row["verification_id"],
        orjson.loads(row["data"]),
        cursor,
    )
