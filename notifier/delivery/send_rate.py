"""The fleet's send rate, as one worker draws on it: tokens taken before a claim (so no
lease waits for a token), handed back when unspent, a halving when the provider throttles,
and a pause until the UTC day rolls over when it says its daily quota is spent. The bucket
itself is one row in the database, on its clock (schema 0019), so every worker's share adds
up to NOTIFIER_SEND_RATE and NOTIFIER_DAILY_QUOTA, not a multiple of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from notifier.storage.connection import Pool
from notifier.storage.queries import sql

# The rate in force grows back by this share of NOTIFIER_SEND_RATE every second after a
# throttle (additive increase): from half, back in full within ten seconds.
RECOVERY_SHARE = 1 / 20
# Never halved below this share of NOTIFIER_SEND_RATE: a provider that throttles everything
# still sees a trickle, and the rate finds its way back up.
FLOOR_SHARE = 1 / 64
# A taker that got nothing waits at least this long before asking again, so idle workers
# do not hammer the bucket's row, and at most this long, so a quota raised or a pause
# cleared by an operator is seen within seconds.
MIN_WAIT_SECONDS = 0.01
MAX_WAIT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Grant:
    """Tokens a claim may spend, the rate in force (None: no rate is kept), how long until
    asking again is worth it, and the pause in force, if the provider asked for one."""

    granted: int
    rate: float | None
    wait: float
    paused_until: datetime | None = None


class SendRate:
    """The fleet's bucket for one worker: `take` before a claim, `give_back` what the claim
    did not send, `throttled` when the provider said to slow down, `pause` when it said the
    day's quota is spent. `rate` and `daily_quota` are NOTIFIER_SEND_RATE and
    NOTIFIER_DAILY_QUOTA (either may be None: a worker that has neither consults the bucket
    only while a pause holds)."""

    def __init__(self, pool: Pool, rate: float | None, daily_quota: int | None = None) -> None:
        self.pool = pool
        self.rate = rate
        self.daily_quota = daily_quota
        self.in_force = rate

    @property
    def limits(self) -> bool:
        """Whether this worker keeps a rate or a quota (else only a pause brings it here)."""
        return self.rate is not None or self.daily_quota is not None

    async def take(self, wanted: int) -> Grant:
        recovery = None if self.rate is None else self.rate * RECOVERY_SHARE
        row = await self.pool.fetchrow(
            sql("take_send_tokens"), wanted, self.rate, recovery, self.daily_quota
        )
        assert row is not None
        rate = None if math.isinf(row["rate"]) else row["rate"]
        self.in_force = rate
        wait = min(max(row["wait"], MIN_WAIT_SECONDS), MAX_WAIT_SECONDS)
        return Grant(row["granted"], rate, wait, row["paused_until"])

    async def give_back(self, count: int) -> None:
        if count > 0:
            await self.pool.execute(sql("return_send_tokens"), count)

    async def throttled(self) -> float | None:
        """Halves the rate in force (at most once a second); the new rate, or None when
        another throttle halved it just now, or no rate is kept."""
        if self.rate is None:
            return None
        rate: float | None = await self.pool.fetchval(
            sql("send_rate_throttled"), self.rate * FLOOR_SHARE
        )
        if rate is not None:
            self.in_force = rate
        return rate

    async def pause(self) -> datetime:
        """Pauses every worker until the UTC day rolls over; when that is."""
        until: datetime = await self.pool.fetchval(sql("send_paused"))
        return until
