"""The fleet's send rate, as one worker draws on it: tokens taken before a claim (so no
lease waits for a token), handed back when unspent, and a halving when the provider
throttles. The bucket itself is one row in the database, on its clock (schema 0019), so
every worker's share adds up to NOTIFIER_SEND_RATE, not a multiple of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from notifier.storage.connection import Pool
from notifier.storage.queries import sql

# The rate in force grows back by this share of NOTIFIER_SEND_RATE every second after a
# throttle (additive increase): from half, back in full within ten seconds.
RECOVERY_SHARE = 1 / 20
# Never halved below this share of NOTIFIER_SEND_RATE: a provider that throttles everything
# still sees a trickle, and the rate finds its way back up.
FLOOR_SHARE = 1 / 64
# A taker that got nothing waits at least this long before asking again, so idle workers
# do not hammer the bucket's row.
MIN_WAIT_SECONDS = 0.01


@dataclass(frozen=True, slots=True)
class Grant:
    """Tokens a claim may spend, the rate in force, and how long until the next token."""

    granted: int
    rate: float
    wait: float


class SendRate:
    """NOTIFIER_SEND_RATE for one worker: `take` before a claim, `give_back` what the claim
    did not send, `throttled` when the provider said to slow down."""

    def __init__(self, pool: Pool, rate: float) -> None:
        self.pool = pool
        self.rate = rate
        self.in_force = rate

    async def take(self, wanted: int) -> Grant:
        row = await self.pool.fetchrow(
            sql("take_send_tokens"), wanted, self.rate, self.rate * RECOVERY_SHARE
        )
        assert row is not None
        self.in_force = row["rate"]
        return Grant(row["granted"], row["rate"], max(row["wait"], MIN_WAIT_SECONDS))

    async def give_back(self, count: int) -> None:
        if count > 0:
            await self.pool.execute(sql("return_send_tokens"), count)

    async def throttled(self) -> float | None:
        """Halves the rate in force (at most once a second); the new rate, or None when
        another throttle halved it just now."""
        rate: float | None = await self.pool.fetchval(
            sql("send_rate_throttled"), self.rate * FLOOR_SHARE
        )
        if rate is not None:
            self.in_force = rate
        return rate
