"""Places per recipient domain: no one domain may hold every send slot (invariant 15).

A slow or tarpitting destination (a server that stalls at RCPT, or a relay that checks
recipients against DNS an attacker runs) keeps each of its sends in flight for up to the
command timeout. Each domain gets at most `per_domain` sends in flight in one worker; a row
beyond that waits here for one of its domain's sends to end, holding no send slot (its lease
is still renewed), and is handed that send's place the moment it ends, so a burst to one busy
but fast domain costs no latency. Past `max_waiting` rows waiting for one domain, a row is
not taken at all: the worker hands it back to the database for a while.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import anyio


@dataclass(slots=True)
class _Domain:
    active: int = 0
    waiting: deque[anyio.Event] = field(default_factory=deque)


class DomainPlaces:
    """The places of every domain with sends in flight or waiting; forgets idle domains."""

    def __init__(self, per_domain: int, max_waiting: int) -> None:
        self.per_domain = per_domain
        self.max_waiting = max_waiting
        self._domains: dict[str, _Domain] = {}

    def take(self, domain: str) -> bool:
        """A place for `domain` now, if one is free (then `leave` it when the send ends)."""
        entry = self._domains.setdefault(domain, _Domain())
        if entry.active >= self.per_domain:
            return False
        entry.active += 1
        return True

    def may_wait(self, domain: str) -> bool:
        """Whether one more row may wait here for `domain` (else it goes back for a while)."""
        entry = self._domains.get(domain)
        return entry is None or len(entry.waiting) < self.max_waiting

    async def wait(self, domain: str) -> None:
        """Until a send of `domain` ends and hands its place over (then `leave` it)."""
        entry = self._domains.setdefault(domain, _Domain())
        handed = anyio.Event()
        entry.waiting.append(handed)
        try:
            await handed.wait()
        except BaseException:
            if handed.is_set():
                # Handed over in the same moment as the cancellation: pass it on.
                self.leave(domain)
            else:
                entry.waiting.remove(handed)
                self._forget_if_idle(domain, entry)
            raise

    def leave(self, domain: str) -> None:
        """A send of `domain` ended: its place goes to the first row waiting, or is freed."""
        entry = self._domains[domain]
        if entry.waiting:
            entry.waiting.popleft().set()
            return
        entry.active -= 1
        self._forget_if_idle(domain, entry)

    def in_flight(self, domain: str) -> int:
        entry = self._domains.get(domain)
        return 0 if entry is None else entry.active

    def _forget_if_idle(self, domain: str, entry: _Domain) -> None:
        if entry.active == 0 and not entry.waiting:
            del self._domains[domain]
