"""Latency distributions: HDR histograms in microseconds, summarised in milliseconds."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

# Histogram range and precision: 1 us to 10 minutes, 3 significant digits.
LOWEST_US = 1
HIGHEST_US = 600_000_000
SIGNIFICANT_DIGITS = 3
PERCENTILES = (50.0, 90.0, 99.0)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Percentiles of one latency, in milliseconds, and the histogram they came from.

    `negative` counts samples whose end came before their start by the clocks involved
    (possible for sub-millisecond paths: a listener can hear a commit before the committing
    client has read its own COMMIT reply); they are recorded as 0.
    """

    count: int
    p50: float
    p90: float
    p99: float
    max: float
    min: float
    mean: float
    negative: int
    hdr: str  # the HDR histogram (microseconds), base64 as HdrHistogram.encode() gives it


def distribution(values_ms: Sequence[float]) -> Distribution | None:
    if not values_ms:
        return None
    histogram = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
    negative = 0
    for value in values_ms:
        if value < 0:
            negative += 1
        histogram.record_value(min(HIGHEST_US, max(0, round(value * 1000))))
    p50, p90, p99 = (histogram.get_value_at_percentile(p) / 1000 for p in PERCENTILES)
    return Distribution(
        count=len(values_ms),
        p50=p50,
        p90=p90,
        p99=p99,
        max=histogram.get_max_value() / 1000,
        min=min(values_ms),
        mean=statistics.fmean(values_ms),
        negative=negative,
        hdr=histogram.encode().decode("ascii"),
    )


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
