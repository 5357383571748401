"""What a webhook attempt's answer means, and when the delivery is tried again.

    pending --claim--> sending --2xx--> delivered
       ^                  |--410 Gone--> dead (the endpoint is disabled)
       |                  |--429 / 503--> pending after Retry-After (or the schedule's wait)
       |                  |--anything else, no answer, refused--> pending after the next wait
       |                  '--the schedule is spent--> dead (replayable from the console)
       '--lease expired (worker died mid-request): the next claim takes it, an unknown outcome

Only a 2xx counts; a redirect is a failure (never followed). A request that went out and got
no answer (a timeout, a dropped connection) is "unknown": the receiver may have it, so a
retry may be a duplicate, which its webhook-id lets the receiver drop.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal, get_args

# How one attempt ended (schema webhook_attempts.outcome, with lease_expired and lease_lost,
# which the database records itself).
AttemptOutcome = Literal["delivered", "failed", "unknown", "gone", "throttled", "refused"]
ATTEMPT_OUTCOMES: tuple[AttemptOutcome, ...] = get_args(AttemptOutcome)
# A delivery's status (schema webhook_deliveries.status).
DeliveryStatus = Literal["pending", "sending", "delivered", "dead"]
# The longest a Retry-After is honoured: a receiver cannot park a delivery for a week.
MAX_RETRY_AFTER_SECONDS = 86400.0
JITTER = 0.1


def outcome_of(status_code: int) -> AttemptOutcome:
    """What a receiver's HTTP status means."""
    if 200 <= status_code < 300:
        return "delivered"
    if status_code == 410:
        return "gone"
    if status_code in (429, 503):
        return "throttled"
    return "failed"


def retry_delay(
    outcome: AttemptOutcome,
    attempt: int,
    schedule: Sequence[float],
    retry_after: float | None = None,
) -> float | None:
    """Seconds until attempt `attempt` + 1, or None: no more attempts (delivered, gone, or
    the schedule spent: attempt n is followed by schedule[n - 1]). A throttled answer's
    Retry-After replaces the schedule's wait (capped), and still uses up an attempt."""
    if outcome in ("delivered", "gone") or attempt > len(schedule):
        return None
    wait = schedule[attempt - 1]
    if outcome == "throttled" and retry_after is not None:
        return min(max(retry_after, 0.0), MAX_RETRY_AFTER_SECONDS)
    return wait * random.uniform(1 - JITTER, 1 + JITTER)
