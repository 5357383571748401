"""The progress bar: one bar over the whole run, advanced by each phase's time budget."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import anyio
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

# How often the bar moves within a phase, seconds.
TICK_SECONDS = 0.25
# A phase never shows as more than this share of its budget until it ends.
MAX_SHARE_BEFORE_END = 0.95


class RunProgress:
    """Shows, on stderr, which phase runs and roughly how much of the run is done."""

    def __init__(self, total_seconds: float) -> None:
        self.console = Console(stderr=True)
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description:<44}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._task: TaskID = self._progress.add_task("starting", total=max(total_seconds, 1.0))
        self._done = 0.0
        self._phase_started: float | None = None
        self._phase_budget = 0.0

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.update(self._task, description="done", completed=self._done)
        self._progress.stop()

    @contextlib.contextmanager
    def phase(self, description: str, budget: float) -> Iterator[None]:
        """A step of the run expected to take about `budget` seconds."""
        self._phase_started, self._phase_budget = time.monotonic(), budget
        self._progress.update(self._task, description=description, completed=self._done)
        if not self.console.is_terminal:
            # No live bar in a log (CI): one line per phase instead.
            total = self._progress.tasks[0].total or 1.0
            self.console.print(f"[{self._done / total:4.0%}] {description}", highlight=False)
        try:
            yield
        finally:
            self._done += budget
            self._phase_started = None
            self._progress.update(self._task, completed=self._done)

    def log(self, message: str) -> None:
        self._progress.console.print(message)

    async def tick(self) -> None:
        """Move the bar within the current phase; runs until cancelled."""
        while True:
            await anyio.sleep(TICK_SECONDS)
            if self._phase_started is None:
                continue
            elapsed = time.monotonic() - self._phase_started
            share = min(elapsed, self._phase_budget * MAX_SHARE_BEFORE_END)
            self._progress.update(self._task, completed=self._done + share)
