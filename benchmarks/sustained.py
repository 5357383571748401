"""Scenario 5: sustained load. Four producers request verifications at a fixed offered rate
(or as fast as they go) for a window, through the product's request statement or through the HTTP
API, while worker processes at library defaults deliver over SMTP into a sink; and a probe
for delayed-ACK stalls on kept-alive connections to `notifier api` and `notifier dev`.

Every latency starts at a producer's wall clock when its COMMIT returned (library) or its
202 arrived (HTTP), and ends at the worker's wall clock when its claim came back committed
or the sink's 250 after DATA came back (see benchmarks/observed_worker.py), or at the claim
statement's database clock (`claimed_at`, for comparison). The backlog over time is worked
out afterwards from commit and completion times (benchmarks/backlog.py): nothing polls the
database while the load runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from benchmarks import observed_worker
from benchmarks.api_servers import ApiServer, running_apis, running_dev
from benchmarks.backlog import Backlog, backlog
from benchmarks.cluster import BenchDatabase, empty_tables
from benchmarks.config import (
    DEV_START_SECONDS,
    PROCESS_START_SECONDS,
    RunConfig,
    SustainedCase,
    sustained_budget,
)
from benchmarks.cost import Meter, Snapshot, usage
from benchmarks.http_producer import (
    HttpProduced,
    KeptAlive,
    api_key,
    probe_delayed_acks,
    produce_http,
)
from benchmarks.outbox import outbox_keys, row_times, wait_until_done
from benchmarks.processes import Child
from benchmarks.producer import Produced, produce_steady
from benchmarks.progress import RunProgress
from benchmarks.stats import distribution
from benchmarks.throughput import Sink, running_sink
from benchmarks.workers import WorkerSpec, running_workers
from notifier.storage.database import connect
from tests.support.databases import with_database

# The producers' own login role, so the statements a request costs can be counted.
PRODUCER_ROLE_PREFIX = "notifier_bench_producer"
# Warm-up rate for a case whose producers go as fast as they can, per second.
WARMUP_RATE = 200.0
# A producer reaching less than this share of its offered rate fell behind.
KEPT_RATE_SHARE = 0.95


@dataclass(slots=True)
class _Run:
    """What every case of the scenario shares."""

    db: BenchDatabase
    config: RunConfig
    log_dir: Path
    progress: RunProgress
    monitor: Any  # admin connection: empties tables, takes snapshots, reads results
    producer_url: str  # the producers' (and the API processes') login
    producer_role: str | None  # None when it could not be created: no per-call statements
    key: str | None  # the API key the HTTP producers present


def _dist(values: list[float]) -> dict[str, Any] | None:
    found = distribution(values)
    return None if found is None else dataclasses.asdict(found)


@contextlib.asynccontextmanager
async def producer_login(monitor: Any, db: BenchDatabase) -> AsyncIterator[tuple[str, str | None]]:
    """A login role for the producers (URL, role), dropped afterwards; the admin's URL and
    no role if the server will not let it log in (e.g. password authentication)."""
    role = f"{PRODUCER_ROLE_PREFIX}_{secrets.token_hex(4)}"
    await monitor.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
    try:
        url = with_database(db.server.admin_url, db.name, user=role)
        try:
            probe = await connect(url)
            await probe.close()
        except Exception:
            yield db.admin_url, None
        else:
            yield url, role
    finally:
        await monitor.execute(f'DROP ROLE IF EXISTS "{role}"')


async def run(
    db: BenchDatabase, config: RunConfig, log_dir: Path, progress: RunProgress
) -> dict[str, Any]:
    monitor = await connect(db.admin_url, server_settings={"application_name": "bench-monitor"})
    try:
        async with producer_login(monitor, db) as (producer_url, producer_role):
            key = await api_key(db.admin_url)
            ctx = _Run(db, config, log_dir, progress, monitor, producer_url, producer_role, key)
            probes = await _probes(ctx)
            runs = [await _case(ctx, case) for case in config.sustained_cases]
    finally:
        await monitor.close()
    return {
        "producers": config.sustained_producers,
        "http_connections": config.sustained_http_connections,
        "sink": runs[0]["sink"] if runs else None,
        "seconds": config.sustained_seconds,
        "probes": probes,
        "runs": runs,
    }


# -- delayed ACKs ----------------------------------------------------------------------------


async def _probes(ctx: _Run) -> list[dict[str, Any]]:
    """Sequential requests on one kept-alive connection to each HTTP server notifier has."""
    n = ctx.config.probe_requests
    found = []
    with ctx.progress.phase("sustained: delayed-ACK probe, notifier api", 3.0):
        async with running_apis(ctx.producer_url, 1, ctx.log_dir, "probe") as (api,):
            probe = await probe_delayed_acks("notifier api", api.port, ctx.key, n)
            found.append(probe.as_json())
    with ctx.progress.phase("sustained: delayed-ACK probe, notifier dev", 4.5):
        async with running_dev(ctx.producer_url, ctx.log_dir, "probe-dev") as dev:
            probe = await probe_delayed_acks("notifier dev", dev.port, ctx.key, n)
            found.append(probe.as_json())
    return found


# -- producers -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Window:
    """What all producers of one window did, together."""

    commits: dict[uuid.UUID, int] = field(default_factory=dict)  # id -> ns
    started_ns: int = 0
    ended_ns: int = 0
    lateness_ms: list[float] = field(default_factory=list)
    stopped_behind: bool = False
    request_ms: list[float] = field(default_factory=list)  # HTTP only
    refused: dict[int, int] = field(default_factory=dict)  # HTTP status -> count

    def add(self, produced: Produced) -> None:
        self.commits.update(produced.commits)
        self.started_ns = min(self.started_ns or produced.started_ns, produced.started_ns)
        self.ended_ns = max(self.ended_ns, produced.ended_ns)
        self.lateness_ms += produced.lateness_ms
        self.stopped_behind |= produced.stopped_behind

    @property
    def seconds(self) -> float:
        return max(1e-9, (self.ended_ns - self.started_ns) / 1e9)


Producer = Callable[[int, float | None, float, float, str], Awaitable[Produced | HttpProduced]]


@contextlib.asynccontextmanager
async def _producers(
    ctx: _Run, case: SustainedCase, apis: Sequence[ApiServer]
) -> AsyncIterator[Producer]:
    """One connection per producer, open for the whole case; yields how to run producer k
    (rate, seconds, phase, tag) on its own connection."""
    count = case.producers(ctx.config)
    async with contextlib.AsyncExitStack() as stack:
        if case.producer == "library":
            conns = []
            for k in range(count):
                conn = await connect(
                    ctx.producer_url, server_settings={"application_name": f"bench-producer{k}"}
                )
                stack.push_async_callback(conn.close)
                conns.append(conn)

            async def library(
                k: int, rate: float | None, seconds: float, phase: float, tag: str
            ) -> Produced:
                return await produce_steady(
                    conns[k], rate=rate, seconds=seconds, tag=tag, phase=phase, max_behind=None
                )

            yield library
            return
        # Connections spread evenly over the API processes, as a load balancer would.
        connections = []
        for k in range(count):
            connection = await KeptAlive.open(apis[k % len(apis)].port, ctx.key)
            stack.push_async_callback(connection.aclose)
            connections.append(connection)

        async def http(
            k: int, rate: float | None, seconds: float, phase: float, tag: str
        ) -> HttpProduced:
            return await produce_http(
                connections[k], rate=rate, seconds=seconds, tag=tag, phase=phase
            )

        yield http


async def _produce(
    producer: Producer, count: int, rate: float | None, seconds: float, tag: str
) -> _Window:
    """`count` producers sharing the offered rate, their schedules interleaved evenly."""
    results: list[Produced | HttpProduced] = [Produced()] * count

    async def one(k: int) -> None:
        share = None if rate is None else rate / count
        phase = 0.0 if rate is None else k / rate
        results[k] = await producer(k, share, seconds, phase, f"{tag}-p{k}")

    async with anyio.create_task_group() as tg:
        for k in range(count):
            tg.start_soon(one, k)
    window = _Window()
    for result in results:
        if isinstance(result, HttpProduced):
            window.add(result.produced)
            window.request_ms += result.request_ms
            for status, n in result.refused.items():
                window.refused[status] = window.refused.get(status, 0) + n
        else:
            window.add(result)
    return window


# -- one case --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Measured:
    window: _Window
    end_ns: int  # when the drain wait ended
    sink: Sink
    workers: tuple[Snapshot, Snapshot]
    producers: tuple[Snapshot, Snapshot] | None


async def _case(ctx: _Run, case: SustainedCase) -> dict[str, Any]:
    cfg = ctx.config
    seconds = case.seconds or cfg.sustained_seconds
    name = f"sustained-{case.name}"
    record_dir = ctx.log_dir / name
    record_dir.mkdir(exist_ok=True)
    offered = "as fast as they go" if case.rate is None else f"{case.rate:g}/s"
    what = f"sustained: {case.producer}, {offered}, {case.workers} worker(s)"
    if case.producer == "http":
        what += f", {case.api_processes} API"
    await empty_tables(ctx.monitor)
    with ctx.progress.phase(what, _budget(cfg, case)):
        measured = await _measure(ctx, case, seconds, name, record_dir)
    # Every process has stopped: the workers' records are on disk.
    window = measured.window
    vids = list(window.commits)
    times = await row_times(ctx.monitor, vids)
    keys = [k for k in await outbox_keys(ctx.monitor) if k[2] in window.commits]
    observed = observed_worker.read_observations(record_dir)
    claimed, accepted = observed.by_verification(keys)
    await empty_tables(ctx.monitor)

    to_claim_committed, to_claim_statement, to_smtp = [], [], []
    completions: list[int] = []
    for vid, committed in window.commits.items():
        if vid in claimed:
            to_claim_committed.append((claimed[vid] - committed) / 1e6)
        if vid in accepted:
            to_smtp.append((accepted[vid] - committed) / 1e6)
        row = times.get(vid)
        if row is None:
            continue
        if row.claimed_us is not None:
            to_claim_statement.append((row.claimed_us * 1000 - committed) / 1e6)
        if row.completed_us is not None:
            completions.append(row.completed_us * 1000)
    queue = backlog(
        list(window.commits.values()),
        completions,
        start_ns=window.started_ns,
        stop_ns=window.ended_ns,
        end_ns=measured.end_ns,
    )
    produced = len(window.commits)
    delivered = sum(1 for row in times.values() if row.status == "sent")
    achieved = produced / window.seconds
    lateness = distribution(window.lateness_ms)
    worker_usage = usage(*measured.workers, other_transactions=produced)
    result: dict[str, Any] = {
        "name": case.name,
        "producer": case.producer,
        "offered_per_s": case.rate,
        "workers": case.workers,
        "api_processes": case.api_processes if case.producer == "http" else None,
        "seconds": round(window.seconds, 3),
        "sink": measured.sink.kind,
        "produced": produced,
        "achieved_per_s": round(achieved, 1),
        "delivered": delivered,
        "undelivered": produced - delivered,
        "producers_stopped_behind": window.stopped_behind,
        "producer_lateness_ms": None
        if lateness is None
        else {"p50": lateness.p50, "p99": lateness.p99, "max": lateness.max},
        "observed_workers": observed.files,
        "commit_to_claim_committed_ms": _dist(to_claim_committed),
        "commit_to_claim_statement_ms": _dist(to_claim_statement),
        "commit_to_smtp_ms": _dist(to_smtp),
        "request_to_202_ms": _dist(window.request_ms) if case.producer == "http" else None,
        "refused": {str(k): v for k, v in window.refused.items()},
        "backlog": queue.as_json(),
        "worker_usage": worker_usage.as_json(case.workers),
        "round_trips_per_delivery": round(worker_usage.round_trips / max(1, delivered), 3),
    }
    result.update(_producer_cost(measured, produced, case))
    result.update(_verdict(case, achieved, queue, produced - delivered))
    return result


def _budget(cfg: RunConfig, case: SustainedCase) -> float:
    """This case's share of the scenario's budget on the progress bar."""
    single = dataclasses.replace(cfg, sustained_cases=(case,), probe_requests=0)
    return sustained_budget(single) - 2 * PROCESS_START_SECONDS - DEV_START_SECONDS


async def _measure(
    ctx: _Run, case: SustainedCase, seconds: float, name: str, record_dir: Path
) -> _Measured:
    cfg = ctx.config
    async with contextlib.AsyncExitStack() as stack:
        sink = await stack.enter_async_context(running_sink(ctx.log_dir, f"{name}-sink"))
        spec = WorkerSpec(mode="notify", transport="smtp", smtp_port=sink.port)
        workers: list[Child] = await stack.enter_async_context(
            running_workers(
                spec,
                ctx.db,
                case.workers,
                ctx.log_dir,
                name,
                command=observed_worker.command(record_dir),
            )
        )
        apis: list[ApiServer] = []
        if case.producer == "http":
            apis = await stack.enter_async_context(
                running_apis(ctx.producer_url, case.api_processes, ctx.log_dir, name)
            )
        producer = await stack.enter_async_context(_producers(ctx, case, apis))
        count = case.producers(cfg)
        await _produce(
            producer, count, case.rate or WARMUP_RATE, cfg.sustained_warmup_seconds, "warmup"
        )
        await wait_until_done(ctx.monitor, cfg.sustained_drain_timeout)
        worker_meter = Meter(ctx.monitor, ctx.db, [w.pid for w in workers])
        producer_meter = None
        if ctx.producer_role is not None:
            as_producers = dataclasses.replace(ctx.db, worker_role=ctx.producer_role)
            producer_meter = Meter(ctx.monitor, as_producers, [a.child.pid for a in apis])
        before = await worker_meter.snapshot()
        producers_before = None if producer_meter is None else await producer_meter.snapshot()
        window = await _produce(producer, count, case.rate, seconds, name)
        after = await worker_meter.snapshot()
        producers = None
        if producer_meter is not None and producers_before is not None:
            producers = (producers_before, await producer_meter.snapshot())
        await wait_until_done(ctx.monitor, cfg.sustained_drain_timeout)
        end_ns = time.time_ns()
    return _Measured(window, end_ns, sink, (before, after), producers)


def _producer_cost(measured: _Measured, produced: int, case: SustainedCase) -> dict[str, Any]:
    """Statements and round trips per request on the producers' side (for HTTP, the API
    processes' own; their CPU is the usage's worker_cpu_s)."""
    if measured.producers is None:
        return {"producer_usage": None, "round_trips_per_call": None}
    used = usage(*measured.producers)
    processes = case.api_processes if case.producer == "http" else 1
    return {
        "producer_usage": used.as_json(processes),
        "round_trips_per_call": round(used.round_trips / max(1, produced), 3),
        "statements_per_call": None
        if used.statements is None
        else round(used.statements / max(1, produced), 3),
    }


def _verdict(
    case: SustainedCase, achieved: float, queue: Backlog, undelivered: int
) -> dict[str, Any]:
    """Whether the producers kept their offered rate and the workers kept up with it."""
    # Judged by the rate reached: a schedule a few requests late at the window's end is noise
    # (producers_stopped_behind and producer_lateness_ms tell it).
    producers_kept = case.rate is None or achieved >= KEPT_RATE_SHARE * case.rate
    flat = queue.flat(achieved)
    workers_kept = bool(flat) and undelivered == 0
    notes = []
    if not producers_kept:
        notes.append(f"producers fell behind ({achieved:,.0f}/s of {case.rate:,.0f}/s)")
    if not flat:
        notes.append(f"workers fell behind (backlog +{queue.slope_per_s or 0:,.0f}/s)")
    if undelivered:
        notes.append(f"{undelivered} undelivered after the drain wait")
    return {
        "producers_kept_rate": producers_kept,
        "backlog_flat": flat,
        "kept_up": producers_kept and workers_kept,
        "verdict": "; ".join(notes) or "kept up",
    }
