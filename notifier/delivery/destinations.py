"""Places per recipient domain: no one domain may hold every send slot (invariant 15).

A slow or tarpitting destination (a server that stalls at RCPT, or a relay that checks
recipients against DNS an attacker runs) keeps each of its sends in flight for up to the
command timeout. So each domain gets a number of places, its sends in flight in one worker,
that starts at one and grows as its sends end quickly, as Postfix's destination concurrency
and TCP's slow start do: half as many again for each quick send (at least one more), half as
many after a slow one (at least one, at most `most`, which leaves a quarter of the slots to
other domains by default). A tarpit
holds one slot; a busy, quick domain soon gets most of them. Its state is kept while the
domain has sends or rows waiting, and for RECALL_SECONDS after, so a slow domain is still
held to little when its rows come back for their retry.

A row beyond its domain's places waits here for one of them, holding no send slot (its
lease is still renewed): it takes a ticket when it is sorted (so no place can end unseen
between the decision and the wait) and is handed the place of the next of its domain's
sends to end. Past `max_waiting` rows waiting for one domain (`slow_waiting` once the
domain has been slow, and a slow send sends the rest away), a row is not taken at all: the
worker hands it back to the database for `defer_delay(domain)` seconds, which doubles each
time while the domain stays slow.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import anyio

# A send that took longer than this (seconds) is slow: its domain loses half its places.
SLOW_SEND_SECONDS = 2.0
# How long a domain's places are remembered once nothing of it is in flight or waiting.
RECALL_SECONDS = 600.0
# Most domains remembered at once (the least recently used are forgotten first).
MAX_DOMAINS = 10_000
# A crowded domain's rows go back to the database for this long, doubling while it stays
# crowded, up to DEFER_MAX_SECONDS.
DEFER_BASE_SECONDS = 1.0
DEFER_MAX_SECONDS = 60.0


@dataclass(slots=True)
class _Turn:
    """One row's place in line: set when handed a place, or when sent away (`evicted`)."""

    event: anyio.Event = field(default_factory=anyio.Event)
    evicted: bool = False


@dataclass(slots=True)
class _Domain:
    places: int
    active: int = 0
    waiting: deque[_Turn] = field(default_factory=deque)
    deferrals: int = 0
    idle_since: float = 0.0
    # A send of it was slow while it was remembered: few of its rows may wait.
    slow: bool = False


class Ticket:
    """A row's turn for a place of its domain, taken when the row is sorted."""

    def __init__(self, places: DomainPlaces, domain: str, turn: _Turn) -> None:
        self._places = places
        self._domain = domain
        self._turn = turn

    async def wait(self) -> bool:
        """Until a send of the domain ends and hands its place over (True: then `leave` it),
        or the domain turned slow and this row is one too many to wait (False: it goes back
        to the database)."""
        try:
            await self._turn.event.wait()
        except BaseException:
            self.give_up()
            raise
        return not self._turn.evicted

    def give_up(self) -> None:
        """Never to be used: the turn goes, or a place already handed is passed on."""
        if self._turn.evicted:
            return
        if self._turn.event.is_set():
            self._places.leave(self._domain)
        else:
            self._places._withdraw(self._domain, self._turn)


class DomainPlaces:
    """The places of every domain with sends in flight, rows waiting, or a recent past.

    `max_waiting` rows may wait for a domain, `slow_waiting` for one that has been slow."""

    def __init__(
        self, most: int, max_waiting: int, first: int = 1, slow_waiting: int | None = None
    ) -> None:
        self.most = most
        self.first = min(first, most)
        self.max_waiting = max_waiting
        self.slow_waiting = max(1, max_waiting // 8) if slow_waiting is None else slow_waiting
        self._domains: OrderedDict[str, _Domain] = OrderedDict()

    def take(self, domain: str) -> bool:
        """A place for `domain` now, if one is free (then `leave` it when the send ends)."""
        entry = self._entry(domain)
        if entry.active >= entry.places or entry.waiting:
            return False
        entry.active += 1
        entry.deferrals = 0
        return True

    def ticket(self, domain: str) -> Ticket | None:
        """A turn to wait for a place of `domain` (already held in line), or None when as
        many rows wait for it as may: then it goes back to the database for a while."""
        entry = self._entry(domain)
        if len(entry.waiting) >= (self.slow_waiting if entry.slow else self.max_waiting):
            return None
        turn = _Turn()
        entry.waiting.append(turn)
        return Ticket(self, domain, turn)

    def ended(self, domain: str, seconds: float | None) -> None:
        """A send of `domain` that held a place ended after `seconds` of SMTP (None: it
        never reached the server): its places grow or shrink, and its place is passed on.
        A slow send also sends away the rows waiting beyond what a slow domain may keep."""
        entry = self._domains[domain]
        if seconds is not None:
            if seconds < SLOW_SEND_SECONDS:
                entry.places = min(entry.places + max(1, entry.places // 2), self.most)
                entry.deferrals = 0  # busy, not slow: its rows come back at once
            else:
                entry.places = max(entry.places // 2, 1)
                entry.slow = True
                while len(entry.waiting) > self.slow_waiting:
                    turn = entry.waiting.pop()  # the newest go
                    turn.evicted = True
                    turn.event.set()
        self.leave(domain)
        # A place gained goes to a row waiting at once, not at the next send's end.
        while entry.waiting and entry.active < entry.places:
            entry.active += 1
            entry.waiting.popleft().event.set()

    def leave(self, domain: str) -> None:
        """A place of `domain` is free: to the first row waiting, unless the domain now has
        fewer places than sends in flight."""
        entry = self._domains[domain]
        if entry.waiting and entry.active <= entry.places:
            entry.waiting.popleft().event.set()
            return
        entry.active -= 1
        self._note_idle(entry)

    def defer_delay(self, domain: str) -> float:
        """How long a row of this crowded domain goes back to the database for."""
        entry = self._entry(domain)
        delay = min(DEFER_BASE_SECONDS * 2.0**entry.deferrals, DEFER_MAX_SECONDS)
        entry.deferrals += 1
        return delay

    def in_flight(self, domain: str) -> int:
        entry = self._domains.get(domain)
        return 0 if entry is None else entry.active

    def places(self, domain: str) -> int:
        entry = self._domains.get(domain)
        return self.first if entry is None else entry.places

    def _withdraw(self, domain: str, turn: _Turn) -> None:
        entry = self._domains[domain]
        entry.waiting.remove(turn)
        self._note_idle(entry)

    def _entry(self, domain: str) -> _Domain:
        entry = self._domains.get(domain)
        now = time.monotonic()
        if entry is not None and self._forgettable(entry, now):
            entry = None
        if entry is None:
            self._forget_old(now)
            entry = self._domains[domain] = _Domain(self.first, idle_since=now)
        self._domains.move_to_end(domain)
        return entry

    def _note_idle(self, entry: _Domain) -> None:
        if entry.active == 0 and not entry.waiting:
            entry.idle_since = time.monotonic()

    def _forgettable(self, entry: _Domain, now: float) -> bool:
        idle = entry.active == 0 and not entry.waiting
        return idle and now - entry.idle_since >= RECALL_SECONDS

    def _forget_old(self, now: float) -> None:
        """Forget the least recently used domains past MAX_DOMAINS, and any long idle."""
        for domain in list(self._domains):
            entry = self._domains[domain]
            busy = entry.active or entry.waiting
            if len(self._domains) <= MAX_DOMAINS and not self._forgettable(entry, now):
                break
            if not busy:
                del self._domains[domain]
