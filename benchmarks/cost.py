"""What the workers cost: statements and round trips they send, CPU they and PostgreSQL burn.

A `Meter` takes snapshots; the difference of two is the `Usage` of the window between them.
Statements come from pg_stat_statements, restricted to the workers' own login role and the
run's database, and are labelled with the name they have in notifier's query catalogue.
Without pg_stat_statements they are inferred from the database's transaction counter
(every worker statement is a transaction of its own), less the producer's commits.

asyncpg's pool resets a connection each time it is released with one message holding four
statements (SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL). They count
as four statements but one round trip.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks import procstat
from benchmarks.cluster import BenchDatabase
from notifier.storage.queries import catalogue

# The statements of asyncpg's pool reset that ride in the same message as the first one.
RESET_TRAILERS = ("CLOSE ALL", "UNLISTEN *", "RESET ALL")
RESET_LEADER = "SELECT pg_advisory_unlock_all()"

WORKER_STATEMENTS = """
SELECT s.query, sum(s.calls)::bigint AS calls
FROM pg_stat_statements s
JOIN pg_roles r ON r.oid = s.userid
JOIN pg_database d ON d.oid = s.dbid
WHERE r.rolname = $1 AND d.datname = current_database()
GROUP BY s.query
"""
DATABASE_TRANSACTIONS = """
SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()
"""
WORKER_BACKENDS = """
SELECT pid FROM pg_stat_activity WHERE usename = $1 AND datname = current_database()
"""


# pg_stat_statements keeps a statement's text from its first token (leading comments are
# gone) and replaces its constants with $n; statements are compared with comments removed,
# and every literal, number, NULL and parameter made alike.
_COMMENT = re.compile(r"--[^\n]*")
_CONSTANT = re.compile(r"'(?:[^']|'')*'|\$\d+|\b\d+(?:\.\d+)?\b|\bNULL\b")


def _normalize(text: str) -> str:
    text = _CONSTANT.sub("?", _COMMENT.sub("", text))
    return " ".join(text.split()).rstrip(";").strip()


def _labels() -> dict[str, str]:
    labels = {_normalize(body): name for name, body in catalogue().items()}
    for part in (RESET_LEADER, *RESET_TRAILERS):
        labels[_normalize(part)] = "pool reset: " + part
    return labels


_LABELS = _labels()


def label(query: str) -> str:
    """The catalogue name of a statement, else its first words."""
    normalized = _normalize(query)
    found = _LABELS.get(normalized)
    if found is not None:
        return found
    return " ".join(_COMMENT.sub("", query).split())[:60]


@dataclass(frozen=True, slots=True)
class Snapshot:
    at: float  # time.monotonic()
    statements: dict[str, int] | None  # label -> calls
    transactions: int
    pg_cpu: float | None
    worker_cpu: dict[int, float]
    backend_cpu: dict[int, float]
    machine_cpu: float | None
    runner_cpu: float


@dataclass(frozen=True, slots=True)
class Usage:
    """What the workers did and cost between two snapshots."""

    seconds: float
    # Statements the workers sent (pg_stat_statements), or None when inferred.
    statements: int | None
    # Client-server exchanges: statements less the reset trailers, or, without
    # pg_stat_statements, the database's transactions less the producer's.
    round_trips: int
    by_statement: dict[str, int] = field(default_factory=dict)
    # CPU seconds: the whole PostgreSQL cluster (None if it is not on this machine), the
    # worker processes, and the backends serving the workers' connections.
    pg_cpu_s: float | None = None
    worker_cpu_s: float = 0.0
    worker_backend_cpu_s: float | None = None
    # Everything else the machine's cores did meanwhile: the sink, and whatever else runs
    # here (other people's work on a shared machine). A noise gauge, not a cost.
    other_cpu_s: float | None = None
    runner_cpu_s: float | None = None
    method: str = "pg_stat_statements"

    @property
    def statements_per_s(self) -> float | None:
        return None if self.statements is None else self.statements / self.seconds

    @property
    def round_trips_per_s(self) -> float:
        return self.round_trips / self.seconds

    def as_json(self, workers: int) -> dict[str, Any]:
        per_worker = max(1, workers)
        return {
            "seconds": round(self.seconds, 3),
            "method": self.method,
            "statements": self.statements,
            "round_trips": self.round_trips,
            "statements_per_s": _round(self.statements_per_s),
            "statements_per_s_per_worker": _round(
                None if self.statements_per_s is None else self.statements_per_s / per_worker
            ),
            "round_trips_per_s": _round(self.round_trips_per_s),
            "round_trips_per_s_per_worker": _round(self.round_trips_per_s / per_worker),
            "by_statement": dict(sorted(self.by_statement.items(), key=lambda kv: -kv[1])),
            "pg_cpu_s": _round(self.pg_cpu_s),
            "worker_cpu_s": _round(self.worker_cpu_s),
            "worker_backend_cpu_s": _round(self.worker_backend_cpu_s),
            "runner_cpu_s": _round(self.runner_cpu_s),
            "other_cpu_s": _round(self.other_cpu_s),
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


class Meter:
    """Snapshots of one run's workers and server, taken over the monitor connection."""

    def __init__(self, conn: Any, db: BenchDatabase, worker_pids: list[int]) -> None:
        self.conn = conn
        self.db = db
        self.worker_pids = worker_pids

    async def snapshot(self) -> Snapshot:
        statements: dict[str, int] | None = None
        if self.db.server.statements:
            statements = {}
            for row in await self.conn.fetch(WORKER_STATEMENTS, self.db.worker_role):
                name = label(row["query"])
                statements[name] = statements.get(name, 0) + int(row["calls"])
        transactions = int(await self.conn.fetchval(DATABASE_TRANSACTIONS))
        backends = [r["pid"] for r in await self.conn.fetch(WORKER_BACKENDS, self.db.worker_role)]
        postmaster = self.db.server.postmaster_pid
        return Snapshot(
            at=time.monotonic(),
            statements=statements,
            transactions=transactions,
            pg_cpu=None if postmaster is None else procstat.tree_cpu_seconds(postmaster),
            worker_cpu={pid: procstat.cpu_seconds(pid) or 0.0 for pid in self.worker_pids},
            backend_cpu={pid: procstat.cpu_seconds(pid) or 0.0 for pid in backends},
            machine_cpu=procstat.machine_busy_seconds(),
            runner_cpu=procstat.self_cpu_seconds(),
        )


def usage(before: Snapshot, after: Snapshot, *, other_transactions: int = 0) -> Usage:
    """The window between two snapshots; `other_transactions` are the producer's commits."""
    seconds = after.at - before.at
    pg_cpu = None
    if before.pg_cpu is not None and after.pg_cpu is not None:
        pg_cpu = after.pg_cpu - before.pg_cpu
    worker_cpu = sum(cpu - before.worker_cpu.get(pid, 0.0) for pid, cpu in after.worker_cpu.items())
    backend_cpu = sum(
        cpu - before.backend_cpu.get(pid, 0.0) for pid, cpu in after.backend_cpu.items()
    )
    runner_cpu = after.runner_cpu - before.runner_cpu
    other_cpu = None
    if before.machine_cpu is not None and after.machine_cpu is not None and pg_cpu is not None:
        machine = after.machine_cpu - before.machine_cpu
        other_cpu = max(0.0, machine - pg_cpu - worker_cpu - runner_cpu)
    common: dict[str, Any] = {
        "seconds": seconds,
        "pg_cpu_s": pg_cpu,
        "worker_cpu_s": worker_cpu,
        "worker_backend_cpu_s": backend_cpu if after.backend_cpu else None,
        "other_cpu_s": other_cpu,
        "runner_cpu_s": runner_cpu,
    }
    if before.statements is not None and after.statements is not None:
        by_statement = {
            name: calls - before.statements.get(name, 0)
            for name, calls in after.statements.items()
            if calls - before.statements.get(name, 0) > 0
        }
        statements = sum(by_statement.values())
        trailers = sum(by_statement.get("pool reset: " + t, 0) for t in RESET_TRAILERS)
        return Usage(
            statements=statements,
            round_trips=statements - trailers,
            by_statement=by_statement,
            **common,
        )
    # Each snapshot itself runs as transactions on the monitor connection (three queries).
    own = 3
    transactions = after.transactions - before.transactions - other_transactions - own
    return Usage(
        statements=None,
        round_trips=max(0, transactions),
        **common,
        method="pg_stat_database transactions (approximate: statistics are flushed late)",
    )


def _sum(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v or 0.0 for v in values)


def combine(usages: list[Usage]) -> Usage:
    """Several windows as one: counts, CPU seconds and durations added."""
    by_statement: dict[str, int] = {}
    for u in usages:
        for name, calls in u.by_statement.items():
            by_statement[name] = by_statement.get(name, 0) + calls
    statements = [u.statements for u in usages]
    return Usage(
        seconds=sum(u.seconds for u in usages),
        statements=None if any(s is None for s in statements) else sum(s or 0 for s in statements),
        round_trips=sum(u.round_trips for u in usages),
        by_statement=by_statement,
        pg_cpu_s=_sum([u.pg_cpu_s for u in usages]),
        worker_cpu_s=sum(u.worker_cpu_s for u in usages),
        worker_backend_cpu_s=_sum([u.worker_backend_cpu_s for u in usages]),
        other_cpu_s=_sum([u.other_cpu_s for u in usages]),
        runner_cpu_s=_sum([u.runner_cpu_s for u in usages]),
        method=usages[0].method if usages else "pg_stat_statements",
    )
