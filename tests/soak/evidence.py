"""What the checks read: the database's rows and attempts, and the leases they describe.

A lease is one claim of one row, named by its random lease token. Its records in
notifier.delivery_attempts say how it ended: a completion while it was still held (or a
release, which is one too), `lease_expired` written by the claim that took the row over, and
possibly a stale completion (lease_held false) from a worker that outlived its lease.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import asyncpg

from tests.soak.probe import QUERIES

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# Ends of leases that no worker completed: the claimer recorded it.
EXPIRED = "lease_expired"
RELEASED = "released"

R = TypeVar("R", bound="DataclassInstance")


def from_record(cls: type[R], record: Any) -> R:
    """A record type from a row with a column of each field's name; timestamps become
    epoch seconds."""
    values = {f.name: record[f.name] for f in dataclasses.fields(cls)}
    return cls(**{k: v.timestamp() if isinstance(v, datetime) else v for k, v in values.items()})


@dataclass(frozen=True, slots=True)
class Row:
    """One outbox row at the end of the run."""

    id: int
    verification_id: uuid.UUID
    status: str
    attempts: int
    max_attempts: int
    unknown_outcomes: int
    message_id: str
    last_outcome: str | None
    last_error: str | None
    lease_owner: str | None
    lease_token: uuid.UUID | None
    created_at: float
    completed_at: float | None
    user_id: str
    email: str


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One row of notifier.delivery_attempts; times are epoch seconds (database clock)."""

    id: int
    outbox_id: int
    attempt: int
    lease_owner: str
    lease_token: uuid.UUID
    discovered_by: str | None
    outcome: str
    smtp_code: int | None
    body_sent: bool
    lease_held: bool
    claimed_at: float | None
    finished_at: float


@dataclass(slots=True)
class Lease:
    """One claim of one row, as its attempt records describe it."""

    token: uuid.UUID
    outbox_id: int
    owner: str
    attempt: int
    records: list[AttemptRecord] = field(default_factory=list)
    current: bool = False  # the row still holds it (the run ended with it in flight)

    @property
    def claimed_at(self) -> float | None:
        known = [r.claimed_at for r in self.records if r.claimed_at is not None]
        return min(known) if known else None

    @property
    def endings(self) -> list[AttemptRecord]:
        """Records that ended the lease while it was held: a held completion, a release,
        or the takeover's lease_expired. Exactly one, unless it is still current."""
        return [r for r in self.records if r.lease_held]

    @property
    def ending(self) -> AttemptRecord | None:
        endings = self.endings
        return endings[0] if len(endings) == 1 else None

    @property
    def stale(self) -> list[AttemptRecord]:
        """Completions by a worker whose lease was gone: they changed nothing."""
        return [r for r in self.records if not r.lease_held]

    @property
    def completions(self) -> list[AttemptRecord]:
        """What the worker itself recorded (held or stale), not the takeover's note."""
        return [r for r in self.records if r.outcome != EXPIRED]

    @property
    def released(self) -> bool:
        return any(r.outcome == RELEASED for r in self.records)

    @property
    def live_end(self) -> float:
        """When the lease stopped being held: its held ending, or never (still current).
        For an expired lease this is when it was taken over, an upper bound."""
        ending = self.ending
        if ending is not None:
            return ending.finished_at
        return float("inf")

    @property
    def window_end(self) -> float:
        """When its worker was last heard of on this lease (stale completions included)."""
        if self.current or not self.records:
            return float("inf")
        return max(r.finished_at for r in self.records)


@dataclass(slots=True)
class Evidence:
    """The database's account of the run, read once at the end."""

    rows: list[Row]
    attempts: list[AttemptRecord]
    dump_paths: list[Path]
    leases: dict[uuid.UUID, Lease] = field(default_factory=dict)
    leases_by_row: dict[int, list[Lease]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for record in self.attempts:
            lease = self.leases.get(record.lease_token)
            if lease is None:
                lease = Lease(
                    record.lease_token, record.outbox_id, record.lease_owner, record.attempt
                )
                self.leases[record.lease_token] = lease
            lease.records.append(record)
        for row in self.rows:
            if row.lease_token is not None:
                lease = self.leases.get(row.lease_token)
                if lease is None:
                    lease = Lease(row.lease_token, row.id, row.lease_owner or "", row.attempts)
                    self.leases[row.lease_token] = lease
                lease.current = True
        by_row: dict[int, list[Lease]] = defaultdict(list)
        for lease in self.leases.values():
            by_row[lease.outbox_id].append(lease)
        for leases in by_row.values():
            leases.sort(key=lambda x: (x.claimed_at or 0.0, x.attempt))
        self.leases_by_row = dict(by_row)


async def collect(url: str, dump_dir: Path) -> Evidence:
    """Read every row and attempt, and dump each of the product's tables to `dump_dir`."""
    conn = await asyncpg.connect(url)
    try:
        rows = [from_record(Row, r) for r in await conn.fetch(QUERIES.sql("rows"))]
        attempts = [
            from_record(AttemptRecord, r) for r in await conn.fetch(QUERIES.sql("attempts"))
        ]
        await anyio.Path(dump_dir).mkdir(parents=True, exist_ok=True)
        paths = []
        for record in await conn.fetch(QUERIES.sql("tables")):
            path = dump_dir / f"{record['tablename']}.copy"
            await conn.copy_from_table(record["tablename"], schema_name="notifier", output=path)
            paths.append(path)
    finally:
        await conn.close()
    return Evidence(rows, attempts, paths)
