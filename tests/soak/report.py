"""The summary: what was injected, what was delivered, what the checks found."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tests.soak.checks import CHECKS, Findings
from tests.soak.evidence import Evidence
from tests.soak.faults import FaultEvent, FaultInjector
from tests.soak.load import LoadStats
from tests.soak.monitor import Backlog
from tests.soak.settings import SoakSettings
from tests.support.smtp_server import Transaction


@dataclass(frozen=True, slots=True)
class Timings:
    """Seconds each phase took."""

    setup: float
    load: float
    drain: float | None
    total: float
    # Seconds from the primary's death to the first message the mail server kept under a
    # claim made on the new primary (failover topology only).
    failover_gap: float | None = None


def failover_gap(
    events: list[FaultEvent], evidence: Evidence, transactions: list[Transaction]
) -> float | None:
    """The failover's gap: from the primary's death to the first delivery claimed after it."""
    died = next((e.at for e in events if e.kind == "pg_failover"), None)
    if died is None:
        return None
    message_of = {row.id: row.message_id for row in evidence.rows}
    claimed_after = {
        message_of[a.outbox_id]
        for a in evidence.attempts
        if a.outcome == "sent" and a.claimed_at is not None and a.claimed_at >= died
    }
    first = min(
        (
            tx.body_at
            for tx in transactions
            if tx.kept
            and tx.body_at is not None
            and tx.body_at >= died
            and tx.message_id in claimed_after
        ),
        default=None,
    )
    return None if first is None else first - died


def summary_rows(
    settings: SoakSettings,
    findings: Findings,
    faults: FaultInjector,
    load: LoadStats,
    backlog: Backlog,
    timings: Timings,
) -> list[tuple[str, list[tuple[str, str]]]]:
    """The summary as sections of (label, value) pairs, for the table and the JSON file."""
    kinds = Counter(event.kind for event in faults.events)
    restarts = [e for e in faults.events if e.kind in ("pg_restart", "pg_failover")]
    c = findings.counts
    restarted = str(len(restarts)) + "".join(f" ({e.done_at - e.at:.1f}s)" for e in restarts)
    if settings.topology == "failover":
        database_fault = [
            ("PostgreSQL failover (kill to promoted)", restarted),
            ("failover gap (kill to first delivery on the new primary)", _gap(timings)),
        ]
    else:
        database_fault = [("PostgreSQL restart (pg_ctl restart took)", restarted)]
    sections: list[tuple[str, list[tuple[str, str]]]] = [
        (
            "Run",
            [
                ("verifications requested", str(settings.count)),
                ("worker processes", str(settings.workers)),
                ("seed", str(settings.seed)),
                ("topology", settings.topology),
                (
                    "lease / slow reply / data timeout",
                    f"{settings.lease_seconds:g}s / "
                    f"{settings.slow_reply_seconds:g}s / {settings.data_timeout:g}s",
                ),
                (
                    "setup / load+faults / drain / total",
                    f"{timings.setup:.1f}s / {timings.load:.1f}s / "
                    f"{_seconds(timings.drain)} / {timings.total:.1f}s",
                ),
            ],
        ),
        (
            "Faults injected",
            [
                ("worker SIGKILL", str(kinds["sigkill"])),
                ("worker SIGTERM (clean shutdown)", str(kinds["sigterm"])),
                (
                    f"worker SIGSTOP for {settings.stall_seconds:g}s, then SIGCONT",
                    str(kinds["sigstop"]),
                ),
                (
                    "LISTEN connection terminated (tries that found none)",
                    f"{kinds['listen_kill']} ({faults.listen_kills_missed})",
                ),
                *database_fault,
                *[(f"SMTP {kind}", str(n)) for kind, n in sorted(findings.smtp_faults.items())],
                ("worker restarts refused (database down)", str(len(faults.start_failures))),
            ],
        ),
        (
            "Deliveries",
            [
                *[(f"rows {status}", str(n)) for status, n in sorted(findings.statuses.items())],
                *[
                    (f"  {reason}", str(n))
                    for reason, n in sorted(findings.failure_reasons.items())
                ],
                (
                    "SMTP transactions / bodies / kept",
                    f"{c['smtp_transactions']} / {c['bodies_received']} / {c['smtp_kept']}",
                ),
                (
                    "leases / expired / stale completions",
                    f"{c['leases']} / {c['leases_expired']} / {c['stale_completions']}",
                ),
                (
                    "attempts per row",
                    ", ".join(
                        f"{k.split('.')[1]}: {v}"
                        for k, v in sorted(c.items())
                        if k.startswith("attempts.")
                    ),
                ),
                ("unknown outcomes recorded", str(c["unknown_outcomes"])),
            ],
        ),
        (
            "Duplicates",
            [
                ("duplicate receipts (kept more than once)", str(c["duplicates"])),
                *[(f"  {cause}", str(n)) for cause, n in findings.duplicate_causes.most_common()],
                (
                    "bodies finished after their lease was taken over",
                    str(c["bodies_after_lease_end"]),
                ),
                (
                    "sends of one Message-ID overlapping a taken-over lease's",
                    str(c["concurrent_sends"]),
                ),
            ],
        ),
        (
            "API and backlog",
            [
                ("requests accepted / replayed", f"{load.accepted} / {load.replays}"),
                (
                    "client retries",
                    ", ".join(f"{cause}: {n}" for cause, n in load.retries_by_cause.most_common())
                    or "0",
                ),
                ("peak rows open", str(backlog.peak_open)),
                ("peak oldest-pending age", f"{backlog.peak_oldest_open:.1f}s"),
                ("peak overdue (due, unclaimed)", f"{backlog.peak_oldest_due:.1f}s"),
                ("time to drain after faults stopped", _seconds(timings.drain)),
                ("raw tokens checked", str(findings.tokens_seen)),
            ],
        ),
    ]
    return sections


def render(
    console: Console,
    sections: list[tuple[str, list[tuple[str, str]]]],
    findings: Findings,
) -> None:
    table = Table(title="notifier soak", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    for title, pairs in sections:
        table.add_row(f"[underline]{title}[/underline]", "")
        for label, value in pairs:
            table.add_row(label, value)
        table.add_section()
    console.print(table)

    checks = Table(title="invariants", title_justify="left")
    checks.add_column("check")
    checks.add_column("result")
    checks.add_column("meaning")
    for name, meaning in CHECKS.items():
        failures = findings.total(name)
        result = "[green]ok[/green]" if not failures else f"[red]{failures} violation(s)[/red]"
        checks.add_row(name, result, meaning)
    console.print(checks)
    for name in CHECKS:
        for example in findings.violations.get(name, []):
            console.print(f"[red]{name}[/red]: {example}", markup=True, highlight=False)


def write_json(
    path: Path,
    sections: list[tuple[str, list[tuple[str, str]]]],
    findings: Findings,
) -> None:
    data: dict[str, Any] = {
        "summary": {title: dict(pairs) for title, pairs in sections},
        "violations": {name: findings.total(name) for name in CHECKS},
        "examples": {k: v for k, v in findings.violations.items() if v},
        "ok": findings.ok,
    }
    path.write_text(json.dumps(data, indent=2))


def _gap(timings: Timings) -> str:
    return "no delivery" if timings.failover_gap is None else f"{timings.failover_gap:.2f}s"


def _seconds(value: float | None) -> str:
    return "did not drain" if value is None else f"{value:.1f}s"


def verdict(findings: Findings, summary: Path) -> str:
    """The failure in a few lines: each violated check, how often, and its first example."""
    lines = [
        f"{name}: {findings.total(name)} violation(s), e.g. {findings.violations[name][0]}"
        for name in CHECKS
        if findings.total(name)
    ]
    return "\n".join(
        ["the soak found violations (all examples above and in the summary):", *lines, str(summary)]
    )
