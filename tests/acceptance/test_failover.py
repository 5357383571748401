"""Failover to a streaming replica under traffic, with Debian's PostgreSQL started by the test.

A primary and a synchronous replica built with pg_basebackup; the API and two workers reach
them through one multi-host URL with target_session_attrs=read-write. While requests flow
and mail goes out, the primary is stopped hard (pg_ctl stop -m immediate); after a pause that
stands in for a failover manager's detection the replica is promoted, as Patroni or a
managed service would. The run happens once for this module; each test checks one promise
about it.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import asyncpg
import pytest

from tests.support.cli import run_cli
from tests.support.ports import free_port
from tests.support.smtp_server import Received, SmtpServer
from tests.support.topologies import unavailable
from tests.support.topology import (
    Failover,
    ReplicatedPostgres,
    TopologyUnavailable,
    topology,
)
from tests.support.traffic import (
    Answer,
    Traffic,
    client_key,
    running_service,
    service_env,
    wait_until,
)

# Seconds between the primary's death and the promotion: a failover manager's detection,
# shortened (Patroni's default TTL is 30 s, managed services take 30-120 s).
DETECTION_SECONDS = 2.0
# Requests a second through the API for the whole run.
RATE = 20.0
# Messages delivered before the primary is killed, and requests accepted after promotion
# before the traffic stops.
DELIVERED_BEFORE = 15
ACCEPTED_AFTER = 20
# Deadlines of the run's phases, seconds.
PHASE_TIMEOUT = 30.0
DRAIN_TIMEOUT = 60.0
DATABASE = "notifier"
FAST = {
    "NOTIFIER_LEASE_SECONDS": "10",
    # Slow on purpose: a sweep right after the failover is the listener's doing.
    "NOTIFIER_SWEEP_INTERVAL": "60",
    "NOTIFIER_LISTENER_CHECK_INTERVAL": "1",
    "NOTIFIER_LISTENER_CHECK_TIMEOUT": "1",
}
# What makes a second copy of a message legitimate: its earlier attempt's outcome was not
# known (connection lost after the body), or its lease ran out before it completed.
AMBIGUOUS = ("unknown", "lease_expired")


@dataclass(frozen=True, slots=True)
class Row:
    outbox_id: int
    message_id: str
    status: str


@dataclass
class FailoverRun:
    """Everything the run produced, read after it from the new primary, the mail server,
    the API's answers and the processes' logs."""

    failover: Failover
    new_primary_port: int
    answers: list[Answer]
    accepted: dict[uuid.UUID, Answer]
    rows: dict[uuid.UUID, Row]
    attempts: dict[int, list[Any]]
    kept: list[Received]
    worker_logs: list[list[str]]
    listeners_on_new_primary: int
    exit_codes: list[int]
    timings: dict[str, float | None] = field(default_factory=dict)


async def run_failover(cluster: ReplicatedPostgres, smtp: SmtpServer) -> FailoverRun:
    url = cluster.url(DATABASE)
    migrated = await run_cli("migrate", env={"NOTIFIER_DATABASE_URL": url})
    assert migrated.returncode == 0, migrated.stderr
    api_port = free_port()
    env = service_env(url, smtp, api_port, **FAST)
    key = await client_key(url)
    traffic = Traffic(f"http://127.0.0.1:{api_port}", key, RATE, secrets.token_hex(4))
    async with running_service(env, [env, env]) as service:
        async with anyio.create_task_group() as tg:
            tg.start_soon(traffic.run)

            async def delivered_before() -> bool:
                return len(smtp.kept) >= DELIVERED_BEFORE

            await wait_until(delivered_before, PHASE_TIMEOUT, "mail flowing before the kill")
            failover = await anyio.to_thread.run_sync(cluster.failover, DETECTION_SECONDS)

            async def accepted_after() -> bool:
                return traffic.accepted_since(failover.promoted_at) >= ACCEPTED_AFTER

            await wait_until(accepted_after, PHASE_TIMEOUT, "202s again after the promotion")
            traffic.stop()

        new_primary = cluster.replica.url(DATABASE)
        accepted = traffic.accepted

        async def drained() -> bool:
            rows = await read_rows(new_primary)
            sent = {r.message_id for r in rows.values() if r.status == "sent"}
            received = {m.message_id for m in smtp.kept}
            return (
                all(
                    v in rows and rows[v].status == "sent" and rows[v].message_id in received
                    for v in accepted
                )
                and sent <= received
            )

        await wait_until(drained, DRAIN_TIMEOUT, "every accepted verification delivered")

        async def listeners_moved() -> bool:
            return await count_listeners(new_primary) == 2

        # Each worker's listener reconnects on its own backoff: give them time to get there.
        with anyio.move_on_after(PHASE_TIMEOUT):
            await wait_until(listeners_moved, PHASE_TIMEOUT, "listeners on the new primary")
        listeners = await count_listeners(new_primary)
        exit_codes = await service.stop()
    rows = await read_rows(new_primary)
    attempts = await read_attempts(new_primary)
    run = FailoverRun(
        failover=failover,
        new_primary_port=cluster.replica.port,
        answers=list(traffic.answers),
        accepted=accepted,
        rows=rows,
        attempts=attempts,
        kept=list(smtp.kept),
        worker_logs=[list(w.lines) for w in service.workers],
        listeners_on_new_primary=listeners,
        exit_codes=exit_codes,
    )
    run.timings = measure(run)
    return run


async def read_rows(url: str) -> dict[uuid.UUID, Row]:
    conn = await asyncpg.connect(url)
    try:
        records = await conn.fetch(
            """SELECT v.id, o.id AS outbox_id, o.message_id, o.status::text AS status
               FROM notifier.verifications v
               JOIN notifier.email_outbox o ON o.verification_id = v.id"""
        )
    finally:
        await conn.close()
    return {r["id"]: Row(r["outbox_id"], r["message_id"], r["status"]) for r in records}


async def read_attempts(url: str) -> dict[int, list[Any]]:
    conn = await asyncpg.connect(url)
    try:
        records = await conn.fetch(
            """SELECT outbox_id, outcome::text AS outcome, lease_held, claimed_at, finished_at
               FROM notifier.delivery_attempts ORDER BY id"""
        )
    finally:
        await conn.close()
    attempts: dict[int, list[Any]] = defaultdict(list)
    for record in records:
        attempts[record["outbox_id"]].append(record)
    return attempts


async def count_listeners(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'notifier-listener'"
        )
        return count
    finally:
        await conn.close()


def measure(run: FailoverRun) -> dict[str, float | None]:
    """The gap, in seconds from the primary's death: to the first message delivered under a
    claim made on the new primary, and to the first request the new primary accepted; and
    the share of it after the promotion was asked for (notifier's own, plus the promotion)."""
    died, promoting = run.failover.died_at, run.failover.promoting_at
    message_of = {row.outbox_id: row.message_id for row in run.rows.values()}
    claimed_after = {
        message_of[outbox_id]
        for outbox_id, attempts in run.attempts.items()
        for a in attempts
        if a["outcome"] == "sent" and a["claimed_at"].timestamp() >= died
    }
    first_delivery = min(
        (m.received_at for m in run.kept if m.message_id in claimed_after and m.received_at > died),
        default=None,
    )
    first_accepted = min(
        (a.answered_at for a in run.answers if a.status == 202 and a.answered_at >= promoting),
        default=None,
    )
    return {
        "detection_seconds": DETECTION_SECONDS,
        "pg_ctl_promote_seconds": run.failover.promoted_at - promoting,
        "gap_to_first_delivery": None if first_delivery is None else first_delivery - died,
        "promote_to_first_delivery": None if first_delivery is None else first_delivery - promoting,
        "gap_to_first_202": None if first_accepted is None else first_accepted - died,
    }


@pytest.fixture(scope="module")
def failover_run() -> Iterator[FailoverRun]:
    try:
        with topology() as owned, SmtpServer(free_port()) as smtp:
            cluster = owned.replicated((DATABASE,))
            yield anyio.run(run_failover, cluster, smtp, backend="asyncio")
    except TopologyUnavailable as exc:
        unavailable(exc)


def test_failover_loses_no_verification_the_api_accepted(failover_run: FailoverRun) -> None:
    run = failover_run
    missing = [v for v in run.accepted if v not in run.rows]
    assert not missing, f"{len(missing)} accepted verifications are not on the new primary"
    unsent = {v: run.rows[v].status for v in run.accepted if run.rows[v].status != "sent"}
    assert not unsent
    received = {m.message_id for m in run.kept}
    assert all(run.rows[v].message_id in received for v in run.accepted)


def test_failover_duplicates_only_follow_recorded_ambiguous_outcomes(
    failover_run: FailoverRun,
) -> None:
    run = failover_run
    copies = Counter(m.message_id for m in run.kept)
    outbox_of = {row.message_id: row.outbox_id for row in run.rows.values()}
    unexplained = {}
    for message_id, count in copies.items():
        if count == 1:
            continue
        attempts = run.attempts.get(outbox_of[message_id], [])
        ambiguous = sum(1 for a in attempts if a["outcome"] in AMBIGUOUS or not a["lease_held"])
        if ambiguous < count - 1:
            unexplained[message_id] = [(a["outcome"], a["lease_held"]) for a in attempts]
    assert not unexplained


def test_failover_api_answers_503_with_retry_after_during_the_gap_then_202(
    failover_run: FailoverRun,
) -> None:
    run = failover_run
    died, promoting, promoted = (
        run.failover.died_at,
        run.failover.promoting_at,
        run.failover.promoted_at,
    )
    # Answered while no server accepted writes (and sent after those the old primary may
    # still have committed): each one refused, saying when to come back.
    during = [a for a in run.answers if a.sent_at >= died + 0.5 and a.answered_at < promoting]
    assert during, "no request fell inside the gap"
    assert {(a.status, a.retry_after is not None) for a in during} == {(503, True)}, [
        (a.status, a.error) for a in during if a.status != 503
    ]
    # Nothing else ever went wrong: accepted, or refused with 503 around the failover.
    assert {a.status for a in run.answers} <= {202, 503}, Counter(a.status for a in run.answers)
    assert any(a.status == 202 and a.sent_at >= promoted for a in run.answers)


def test_failover_listeners_reconnect_to_the_new_primary_and_sweep(
    failover_run: FailoverRun,
) -> None:
    run = failover_run
    assert run.listeners_on_new_primary == 2
    for lines in run.worker_logs:
        messages = [json.loads(line)["msg"] for line in lines if line.startswith("{")]
        lost = next(i for i, m in enumerate(messages) if "LISTEN connection lost" in m)
        where = f"listening on 127.0.0.1:{run.new_primary_port} "
        assert any(where in m and "sweeping" in m for m in messages[lost:]), messages[lost:]


def test_failover_workers_and_api_still_stop_cleanly(failover_run: FailoverRun) -> None:
    assert failover_run.exit_codes == [0, 0, 0]


def test_failover_gap_is_measured(
    failover_run: FailoverRun, record_property: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    timings = failover_run.timings
    for name, value in timings.items():
        record_property(name, value)
    with capsys.disabled():
        shown = ", ".join(
            f"{k} {v:.2f}s" if v is not None else f"{k} none" for k, v in timings.items()
        )
        print(f"\nfailover: {shown}")
    # A delivery happened under a claim made on the new primary; how soon is reported, not
    # asserted (timings on a shared machine are noise).
    assert timings["gap_to_first_delivery"] is not None
    assert timings["gap_to_first_202"] is not None
