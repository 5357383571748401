"""The retry schedules: bounded exponential backoff with jitter and a ceiling for failed
attempts (invariant 4), and the shorter wait after a provider throttled us."""

from __future__ import annotations

import random
from dataclasses import dataclass

from notifier.config import WorkerSettings


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry n (1-based): base * factor**(n-1), jittered, never above the ceiling."""

    base: float
    factor: float
    ceiling: float
    jitter: float

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> Backoff:
        return cls(
            settings.retry_base,
            settings.retry_factor,
            settings.retry_ceiling,
            settings.retry_jitter,
        )

    def nominal(self, retry: int) -> float:
        """The un-jittered delay; exponent capped so huge retry numbers cannot overflow."""
        exponent = min(max(retry, 1) - 1, 64)
        return min(self.ceiling, self.base * self.factor**exponent)

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return min(self.ceiling, self.nominal(retry) * (1.0 + spread))


class Throttle:
    """How long to wait after the provider throttled this worker's sends: `base` after the
    first, doubling with each throttle (up to `ceiling`) and halving with each send that
    goes through, so a worker settles near the rate its provider takes. One per worker:
    a provider throttles an account, not a message."""

    def __init__(self, base: float, ceiling: float, jitter: float = 0.2) -> None:
        self.base = base
        self.ceiling = ceiling
        self.jitter = jitter
        self._wait = 0.0

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> Throttle:
        return cls(settings.throttle_base, settings.throttle_ceiling, settings.retry_jitter)

    @property
    def wait(self) -> float:
        """The wait the next throttle would start from (0: none seen lately)."""
        return self._wait

    def throttled(self, rng: random.Random | None = None) -> float:
        """The delay for a throttled try, jittered."""
        self._wait = min(self.ceiling, max(self.base, self._wait * 2))
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return min(self.ceiling, self._wait * (1.0 + spread))

    def sent(self) -> None:
        self._wait = 0.0 if self._wait <= self.base else self._wait / 2
