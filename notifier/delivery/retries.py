"""The retry schedule: bounded exponential backoff with jitter and a ceiling (invariant 4)."""

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
