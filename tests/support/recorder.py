"""A worker observer for tests: it keeps every event, so a test awaits the one it needs under
a deadline instead of sleeping (River's test signals). Production keeps no events."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import anyio

from notifier.delivery.worker import Worker
from notifier.events import Observer, WorkerEvent

E = TypeVar("E")


class Recorder:
    """Every event a worker told, in order; `then` is told too (say, the metrics)."""

    def __init__(self, then: Observer | None = None) -> None:
        self.events: list[WorkerEvent] = []
        self._then = then
        # Created by the first waiter, inside the event loop; each event wakes and drops it.
        self._changed: anyio.Event | None = None

    def notice(self, event: WorkerEvent) -> None:
        self.events.append(event)
        if self._then is not None:
            self._then.notice(event)
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    async def wait_for(self, predicate: Callable[[Recorder], bool]) -> None:
        """Return once `predicate(self)` holds; callers bound the wait with anyio.fail_after."""
        while not predicate(self):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    async def wait_for_kind(self, kind: type[E], count: int = 1) -> list[E]:
        await self.wait_for(lambda r: len(r.of(kind)) >= count)
        return self.of(kind)


def recorded(worker: Worker) -> Recorder:
    """The recorder a test worker (tests.support.workers.running_worker) tells."""
    assert isinstance(worker.observer, Recorder), "the worker was not started with a Recorder"
    return worker.observer
