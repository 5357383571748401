"""The intake: what the claimer should claim next, from notifications, sweeps and the retry
timer, which offers a row this worker scheduled a retry (or a deferral) for the moment it
comes due, so no retry waits for a sweep."""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable
from itertools import islice

import anyio

from notifier.outcomes import Discovery

# Local retry deadlines are padded so the claim never arrives before the database's due time.
RETRY_TIMER_MARGIN_SECONDS = 0.005
# Notified ids held while every send slot is busy. Past this, ids are dropped and a sweep is
# requested instead: the rows stay in the table, so nothing is lost and memory stays bounded.
MAX_WAITING_IDS = 10_000


class Intake:
    """Notified ids (deduplicated, bounded, oldest first) and pending sweep requests.

    Producers (the listener's callback, the sweeper, the retry timer) call the synchronous
    offer/request methods; the claimer awaits `wait()` and takes work.
    """

    def __init__(self, max_waiting_ids: int = MAX_WAITING_IDS) -> None:
        # id -> (monotonic time it was offered, how it was discovered)
        self._ids: dict[int, tuple[float, Discovery]] = {}
        self._sweep: Discovery | None = None
        self._max = max_waiting_ids
        self._wake: anyio.Event | None = None
        self.dropped_ids = 0
        self._later: list[tuple[float, int]] = []  # (monotonic due time, outbox id), a heap
        self._later_added: anyio.Event | None = None

    def offer_ids(self, ids: Iterable[int], discovered_by: Discovery = "notify") -> None:
        now = time.monotonic()
        for outbox_id in ids:
            if len(self._ids) >= self._max and outbox_id not in self._ids:
                self.dropped_ids += 1
                self.request_sweep("sweep")
                continue
            self._ids.setdefault(outbox_id, (now, discovered_by))
        self._signal()

    def offer_later(self, outbox_id: int, delay: float) -> None:
        """Offer `outbox_id` as "retry_timer" once `delay` seconds have passed (and the
        database's due time with them), while run_retry_timer runs."""
        due = time.monotonic() + delay + RETRY_TIMER_MARGIN_SECONDS
        heapq.heappush(self._later, (due, outbox_id))
        if self._later_added is not None:
            self._later_added.set()

    async def run_retry_timer(self) -> None:
        """Wake exactly when a row offered for later comes due, and offer it."""
        while True:
            self._later_added = anyio.Event()
            if not self._later:
                await self._later_added.wait()
                continue
            wait = self._later[0][0] - time.monotonic()
            if wait > 0:
                with anyio.move_on_after(wait):
                    await self._later_added.wait()
                continue
            due: list[int] = []
            now = time.monotonic()
            while self._later and self._later[0][0] <= now:
                due.append(heapq.heappop(self._later)[1])
            self.offer_ids(due, "retry_timer")

    def request_sweep(self, reason: Discovery) -> None:
        # A retry-timer or poll request names the more specific reason; keep it.
        if self._sweep is None or self._sweep == "sweep":
            self._sweep = reason
        self._signal()

    def has_work(self) -> bool:
        return bool(self._ids) or self._sweep is not None

    async def wait(self) -> None:
        while not self.has_work():
            self._wake = anyio.Event()
            await self._wake.wait()

    def take_ids(self, limit: int) -> dict[int, tuple[float, Discovery]]:
        taken: dict[int, tuple[float, Discovery]] = {}
        for outbox_id in list(islice(self._ids, limit)):
            taken[outbox_id] = self._ids.pop(outbox_id)
        return taken

    def take_sweep(self) -> Discovery | None:
        reason, self._sweep = self._sweep, None
        return reason

    def _signal(self) -> None:
        if self._wake is not None:
            self._wake.set()
            self._wake = None
