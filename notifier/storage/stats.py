"""The queue's health from the database: the figures the gauges sample, and `notifier stats`
as a table or JSON, as an alert probe."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from notifier.config import Thresholds
from notifier.storage.connection import Runner
from notifier.storage.queries import sql

# Below this many claims in the window, a sweep share says nothing.
MIN_CLAIMS_FOR_SHARE = 20


@dataclass
class Stats:
    queue: dict[str, int | float]  # counts are whole numbers; ages and shares are not
    window_seconds: float
    outcomes: dict[str, int] = field(default_factory=dict)
    discovered_by: dict[str, int] = field(default_factory=dict)
    finished: dict[str, int] = field(default_factory=dict)
    alerts: list[str] = field(default_factory=list)

    @property
    def sweep_share(self) -> float | None:
        total = sum(self.discovered_by.values())
        if total < MIN_CLAIMS_FOR_SHARE:
            return None
        found_late = self.discovered_by.get("sweep", 0) + self.discovered_by.get("poll", 0)
        return found_late / total

    def as_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["sweep_share"] = self.sweep_share
        return body


async def queue_figures(pool: Runner) -> dict[str, float]:
    """The queue's health now, every figure a number: what the queue gauges show."""
    row = await pool.fetchrow(sql("queue_health"))
    return {key: float(value or 0) for key, value in dict(row).items()}


async def collect(conn: Runner, window: float, thresholds: Thresholds) -> Stats:
    row = await conn.fetchrow(sql("queue_health"))
    queue: dict[str, int | float] = {k: 0 if v is None else v for k, v in row.items()}
    stats = Stats(queue=queue, window_seconds=window)
    groups: Mapping[str, dict[str, int]] = {
        "outcome": stats.outcomes,
        "discovered_by": stats.discovered_by,
        "finished": stats.finished,
    }
    for row in await conn.fetch(sql("delivery_stats"), window):
        groups[row["kind"]][row["name"]] = int(row["count"])
    if queue["oldest_pending_seconds"] > thresholds.oldest_pending:
        stats.alerts.append(
            f"oldest pending row has waited {queue['oldest_pending_seconds']:.0f}s "
            f"(threshold {thresholds.oldest_pending:.0f}s)"
        )
    if queue["expired_leases"] > thresholds.expired_leases:
        stats.alerts.append(
            f"{queue['expired_leases']:.0f} rows hold expired leases "
            f"(threshold {thresholds.expired_leases})"
        )
    share = stats.sweep_share
    if share is not None and share > thresholds.sweep_share:
        stats.alerts.append(
            f"{share:.0%} of claims were found by the sweep, not a notification "
            f"(threshold {thresholds.sweep_share:.0%}): is LISTEN behind a pooler?"
        )
    return stats


def render(stats: Stats, console: Console) -> None:
    q = stats.queue
    queue = Table(title="Queue now", show_header=False)
    queue.add_row("pending (due now)", f"{q['pending']:.0f} ({q['pending_due']:.0f})")
    queue.add_row("sending", f"{q['sending']:.0f}")
    queue.add_row("expired leases", f"{q['expired_leases']:.0f}")
    queue.add_row("oldest pending age", f"{q['oldest_pending_seconds']:.1f} s")
    queue.add_row("NOTIFY queue usage", f"{q['notification_queue_usage']:.2%}")
    console.print(queue)
    window = Table(title=f"Last {stats.window_seconds:.0f} s")
    window.add_column("")
    window.add_column("kind")
    window.add_column("count", justify="right")
    for label, group in (
        ("finished", stats.finished),
        ("attempt outcome", stats.outcomes),
        ("claimed by", stats.discovered_by),
    ):
        for name, count in sorted(group.items()):
            window.add_row(label, name, str(count))
    share = stats.sweep_share
    window.add_row("sweep share", "", "n/a" if share is None else f"{share:.1%}")
    console.print(window)
    for alert in stats.alerts:
        console.print(f"[bold red]ALERT[/]: {alert}")
