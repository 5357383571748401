"""The send gate: the questions a send asks on its way out (mailer.Gate), answered for one
flight from its lease and its link.

Before MAIL FROM, a claim younger than a tenth of the lease may begin at once (its claim
settled everything the database knew); an older one (it waited for a connection or a place
of its domain, or the process stalled) asks the database again. Before DATA, only this
process's own clocks are asked, never the database: the connection must not idle between
RCPT and DATA (a database round trip there once idled every pooled connection).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from notifier.delivery.leases import Claimed
from notifier.outcomes import Sendability

# A body is sent only while at least this fraction of the lease is certainly left.
LEASE_SAFETY_FRACTION = 0.1
# A body is sent only while the link certainly has this long left, seconds (the body's own
# transfer and the server's queue come after the check).
LINK_SAFETY_SECONDS = 1.0
# A claim older than this fraction of the lease when its send starts is checked against the
# database first, before MAIL FROM.
RECHECK_AFTER_FRACTION = 0.1


@dataclass(slots=True)
class Flight:
    """One send in flight: its lease, when it was claimed and last renewed (monotonic), how
    long its link had left at the claim (the database's clock), and how to stop it."""

    row: Claimed
    token: uuid.UUID
    claimed_at: float
    link_left: float
    renewed_at: float
    scope: anyio.CancelScope | None = None
    body_sent: bool = False
    lost: bool = False


class SendGate:
    """The gate of one flight; `answer` keeps the last answer it gave (None: it gave none,
    or the database could not say)."""

    def __init__(
        self,
        flight: Flight,
        lease_seconds: float,
        database: Callable[[Flight], Awaitable[Sendability | None]],
    ) -> None:
        self._flight = flight
        self._database = database
        # A send may start only while this much of the lease is certainly left.
        self._usable_lease = lease_seconds * (1 - LEASE_SAFETY_FRACTION)
        self._recheck_after = lease_seconds * RECHECK_AFTER_FRACTION
        self.answer: Sendability | None = None

    async def may_begin(self) -> bool:
        if time.monotonic() - self._flight.claimed_at < self._recheck_after:
            return True
        answer = await self._database(self._flight)
        if answer is not None and answer.lease_held:
            # The link as this process's clocks see it may be nearer its end than the
            # database said at the check's start.
            local = self.still_sendable()
            answer = answer if local.verification == "live" else local
        self.answer = answer
        return answer is not None and sendable(answer)

    def may_send_body(self) -> bool:
        self.answer = self.still_sendable()
        self._flight.body_sent = sendable(self.answer)
        return self._flight.body_sent

    def still_sendable(self) -> Sendability:
        """The answer from this process's own clocks. The lease: renewed at `renewed_at`
        (monotonic), certainly ours for the usable part of the lease after it, whatever a
        pause or a frozen VM did meanwhile. The link: it had `link_left` seconds when the
        claim's statement was sent (the database's clock, at claim), and has that less the
        time since, with a margin for the body's own transfer."""
        flight, now = self._flight, time.monotonic()
        if flight.lost or now >= flight.renewed_at + self._usable_lease:
            return Sendability(lease_held=False, verification=None)
        if flight.link_left - (now - flight.claimed_at) <= LINK_SAFETY_SECONDS:
            return Sendability(lease_held=True, verification="expired")
        return Sendability(lease_held=True, verification="live")


def sendable(answer: Sendability) -> bool:
    return answer.lease_held and answer.verification == "live"
