"""Worker signals: what a running worker did, for tests to await and telemetry to count.

Long-running loops emit an event at each step that matters; a test awaits the one it needs
under a deadline instead of sleeping (River's test signals).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

# Events kept for tests to inspect; older ones are dropped so a long run stays bounded.
MAX_KEPT_EVENTS = 100_000


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened: its kind, when (monotonic seconds), and details."""

    kind: str
    at: float
    data: dict[str, Any] = field(default_factory=dict)


Subscriber = Callable[[Event], None]


class Signals:
    """A bounded log of worker events, with waiters and subscribers.

    `emit` is synchronous and cheap so it can be called from anywhere in the worker's event
    loop, including asyncpg's notification callbacks.
    """

    def __init__(self) -> None:
        self.events: list[Event] = []
        # Created by the first waiter, inside the event loop; emitting wakes and drops it.
        self._changed: anyio.Event | None = None
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def emit(self, kind: str, **data: Any) -> None:
        event = Event(kind, time.monotonic(), data)
        self.events.append(event)
        if len(self.events) > MAX_KEPT_EVENTS:
            del self.events[: MAX_KEPT_EVENTS // 2]
        for subscriber in self._subscribers:
            subscriber(event)
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    async def wait_for(self, predicate: Callable[[Signals], bool]) -> None:
        """Return once `predicate(self)` holds; callers bound the wait with anyio.fail_after."""
        while not predicate(self):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    async def wait_for_kind(self, kind: str, count: int = 1) -> list[Event]:
        await self.wait_for(lambda s: len(s.of(kind)) >= count)
        return self.of(kind)
