"""The backlog, sampled from outside twice a second: how many rows are open, how old."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import anyio

from tests.soak.probe import Probe

SAMPLE_INTERVAL_SECONDS = 0.5


@dataclass(slots=True)
class Sample:
    at: float
    total: int
    open: int
    oldest_open_seconds: float | None
    oldest_due_seconds: float | None


@dataclass(slots=True)
class Backlog:
    """Every sample taken, and how many could not be taken (the database was down)."""

    samples: list[Sample] = field(default_factory=list)
    failed: int = 0

    @property
    def last(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    @property
    def peak_oldest_open(self) -> float:
        return max((s.oldest_open_seconds or 0.0 for s in self.samples), default=0.0)

    @property
    def peak_oldest_due(self) -> float:
        return max((s.oldest_due_seconds or 0.0 for s in self.samples), default=0.0)

    @property
    def peak_open(self) -> int:
        return max((s.open for s in self.samples), default=0)


async def sample_backlog(url: str, backlog: Backlog, stop: anyio.Event) -> None:
    """Sample until `stop`; a failed sample (database restarting) is counted and skipped."""
    probe = Probe(url, "soak-monitor")
    try:
        while not stop.is_set():
            try:
                row = await probe.fetchrow("backlog")
            except Exception:
                backlog.failed += 1
            else:
                backlog.samples.append(
                    Sample(
                        time.time(),
                        row["total"],
                        row["open"],
                        row["oldest_open_seconds"],
                        row["oldest_due_seconds"],
                    )
                )
            with anyio.move_on_after(SAMPLE_INTERVAL_SECONDS):
                await stop.wait()
    finally:
        await probe.close()


async def wait_drained(url: str, expected: int, within: float) -> float | None:
    """Seconds until all `expected` rows are terminal, or None if not `within` seconds."""
    probe = Probe(url, "soak-drain")
    began = time.monotonic()
    try:
        while time.monotonic() - began < within:
            try:
                row = await probe.fetchrow("backlog")
            except Exception:
                row = None
            if row is not None and row["open"] == 0 and row["total"] >= expected:
                return time.monotonic() - began
            await anyio.sleep(0.2)
        return None
    finally:
        await probe.close()
