"""The backlog over time, worked out afterwards from when rows were committed and completed.

Nothing polls the database while load runs: the backlog at a moment is the rows whose
COMMIT had returned by then, less the rows whose completion had started by then
(`email_outbox.completed_at`). Both are this machine's wall clock.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Seconds between two samples of the backlog, at most; a short window gets at least
# MIN_SAMPLES samples.
STEP_SECONDS = 0.25
MIN_SAMPLES = 50
# The start of a window is left out of its trend: the queue fills to its working level first.
TREND_SKIP_SECONDS = 1.0
# A backlog is flat when its trend grows by less than this share of the production rate per
# second, or when what was left at the end went within DRAINED_SECONDS: a short window's trend
# follows its last spike, but workers that fell behind take as long to catch up as they lost
# (a backlog of (rate - capacity) x window drains at capacity).
FLAT_SHARE = 0.01
DRAINED_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Backlog:
    """Rows committed but not yet completed, sampled every `step_s` from the window's start."""

    step_s: float
    samples: list[tuple[float, int]]  # (seconds since the window started, rows)
    stop_s: float  # when the producers stopped, seconds since the window started
    max: int
    at_stop: int  # when the producers stopped
    # Least-squares growth over the producing window (its first second left out), rows/s.
    slope_per_s: float | None
    # Seconds after the producers stopped until no row was left; None if some never were.
    drained_s: float | None

    def flat(self, rate_per_s: float) -> bool | None:
        if self.slope_per_s is None or rate_per_s <= 0:
            return None
        if self.drained_s is not None and self.drained_s <= DRAINED_SECONDS:
            return True
        return self.slope_per_s <= FLAT_SHARE * rate_per_s

    def as_json(self) -> dict[str, Any]:
        return {
            "step_s": self.step_s,
            "stop_s": round(self.stop_s, 3),
            "max": self.max,
            "at_stop": self.at_stop,
            "slope_per_s": None if self.slope_per_s is None else round(self.slope_per_s, 3),
            "drained_s": None if self.drained_s is None else round(self.drained_s, 3),
            "samples": [[round(t, 3), rows] for t, rows in self.samples],
        }


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of y over x, or None for fewer than two distinct x."""
    n = len(points)
    if n < 2:
        return None
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def backlog(
    commits_ns: Sequence[int],
    completions_ns: Sequence[int],
    *,
    start_ns: int,
    stop_ns: int,
    end_ns: int,
    step_s: float | None = None,
) -> Backlog:
    """The backlog from `start_ns` (producers began) to `end_ns` (the drain wait ended);
    `completions_ns` holds only rows that completed, so the rest stay in the backlog."""
    commits = sorted(commits_ns)
    completions = sorted(completions_ns)

    def rows_at(at: int) -> int:
        # Never below 0: an HTTP producer's commit time is its 202, which a fast delivery
        # can precede.
        return max(0, bisect.bisect_right(commits, at) - bisect.bisect_right(completions, at))

    stop_t = (stop_ns - start_ns) / 1e9
    if step_s is None:
        step_s = min(STEP_SECONDS, stop_t / MIN_SAMPLES) or STEP_SECONDS
    moments = [*range(start_ns, end_ns, max(1, round(step_s * 1e9))), end_ns]
    samples = [((at - start_ns) / 1e9, rows_at(at)) for at in moments]
    skip = min(TREND_SKIP_SECONDS, stop_t / 2)
    trend = [(t, float(rows)) for t, rows in samples if skip <= t <= stop_t]
    drained_s = None
    if completions and len(completions) >= len(commits):
        drained_s = max(0.0, (completions[-1] - stop_ns) / 1e9)
    return Backlog(
        step_s=step_s,
        samples=samples,
        stop_s=stop_t,
        max=max((rows for _, rows in samples), default=0),
        at_stop=rows_at(stop_ns),
        slope_per_s=slope(trend),
        drained_s=drained_s,
    )
