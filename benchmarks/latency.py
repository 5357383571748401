"""Scenarios 1 and 2: latency per mode (notify; poll at 1 s, 100 ms, 10 ms), against the
LISTEN floor, and what each mode costs idle and under load.

Every latency starts at the producer's wall clock just after COMMIT returned, and ends at
the claim's database clock (email_outbox.claimed_at) or at the sink's wall clock when the
final "." of the message arrived. All three clocks are this machine's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from benchmarks.cluster import BenchDatabase, empty_tables
from benchmarks.config import MODES, ModeSpec, RunConfig
from benchmarks.cost import Meter, Usage, combine, usage
from benchmarks.outbox import RowTimes, outbox_ids, row_times, wait_until_done
from benchmarks.processes import started
from benchmarks.producer import Produced, insert_backlog, produce_steady
from benchmarks.progress import RunProgress
from benchmarks.stats import distribution
from benchmarks.workers import WorkerSpec, running_workers
from notifier.delivery.leases import Leases
from notifier.delivery.listener import CHANNEL, parse_payload
from notifier.storage.database import connect, create_pool

PYTHON = sys.executable
# After the producer stops, the floor listener gets this long for the last notifications.
FLOOR_TAIL_SECONDS = 0.5
# Beyond its poll interval, a mode gets this long to deliver what was produced.
DRAIN_GRACE_SECONDS = 15.0
_VERIFICATION_ID = re.compile(r"<verify\.([0-9a-f-]{36})@")


@dataclass(slots=True)
class _Run:
    """What every phase of the scenario shares."""

    db: BenchDatabase
    config: RunConfig
    log_dir: Path
    progress: RunProgress
    monitor: Any  # admin connection: empties tables, reads counters and results
    producer: Any  # admin connection: commits verifications


def _dist(values: list[float]) -> dict[str, Any] | None:
    found = distribution(values)
    return None if found is None else dataclasses.asdict(found)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


async def run(
    db: BenchDatabase, config: RunConfig, log_dir: Path, progress: RunProgress
) -> dict[str, Any]:
    monitor = await connect(db.admin_url, server_settings={"application_name": "bench-monitor"})
    producer = await connect(db.admin_url, server_settings={"application_name": "bench-producer"})
    ctx = _Run(db, config, log_dir, progress, monitor, producer)
    segments: dict[str, list[_Segment]] = {spec.name: [] for spec in MODES}
    try:
        floor = await _floor(ctx)
        claim_commit = await _claim_commit(ctx)
        # Modes take turns, round after round, so a noisy stretch on a shared machine lands
        # on every mode a little rather than on one mode entirely.
        for round_number in range(config.latency_rounds):
            turn = round_number % len(MODES)
            for spec in (*MODES[turn:], *MODES[:turn]):
                segments[spec.name].append(await _segment(ctx, spec, round_number))
    finally:
        await producer.close()
        await monitor.close()
    return {
        "rate_per_s": config.rate,
        "rounds": config.latency_rounds,
        "load_seconds": config.load_seconds * config.latency_rounds,
        "idle_seconds": config.idle_seconds * config.latency_rounds,
        "workers": config.latency_workers,
        "floor": floor,
        "claim_commit": claim_commit,
        "modes": [_mode_result(ctx, spec, segments[spec.name]) for spec in MODES],
    }


# -- the floor -------------------------------------------------------------------------------


async def _floor(ctx: _Run) -> dict[str, Any]:
    """The same commits, heard by a bare LISTEN connection instead of a worker."""
    cfg = ctx.config
    await empty_tables(ctx.monitor)
    record = ctx.log_dir / "floor-notifications.txt"
    argv = [
        PYTHON,
        "-m",
        "benchmarks.floor",
        "--url",
        ctx.db.admin_url,
        "--channel",
        CHANNEL,
        "--record",
        str(record),
    ]
    with ctx.progress.phase("latency: LISTEN floor", cfg.floor_seconds + 2):
        async with started("floor", argv, log_dir=ctx.log_dir, ready="ready"):
            produced = await produce_steady(
                ctx.producer, rate=cfg.rate, seconds=cfg.floor_seconds, tag="floor"
            )
            await anyio.sleep(FLOOR_TAIL_SECONDS)
        verification_of = await outbox_ids(ctx.monitor)
    heard: dict[uuid.UUID, int] = {}
    for line in record.read_text(encoding="utf-8").splitlines():
        at, _, payload = line.partition(" ")
        parsed = parse_payload(payload)
        if not isinstance(parsed, list):
            continue
        for outbox_id in parsed:
            vid = verification_of.get(outbox_id)
            if vid is not None and vid not in heard:
                heard[vid] = int(at)
    latencies = [(heard[v] - c) / 1e6 for v, c in produced.commits.items() if v in heard]
    await empty_tables(ctx.monitor)
    return {
        "produced": len(produced.commits),
        "heard": len(latencies),
        "commit_to_notification_ms": _dist(latencies),
    }


# -- what a claim's commit costs ---------------------------------------------------------------


async def _claim_commit(ctx: _Run) -> dict[str, Any]:
    """One-row claims, timed from the worker's side: through the product's pool (as the worker
    claims), and on a bare connection with synchronous_commit on and off."""
    samples = ctx.config.claim_commit_samples
    await empty_tables(ctx.monitor)
    with ctx.progress.phase("latency: cost of a claim's commit", 3 * samples / 500):
        await insert_backlog(ctx.monitor, 3 * samples, "claimcost")
        ids = sorted(await outbox_ids(ctx.monitor))
        pool = await create_pool(ctx.db.worker_url, max_size=1)
        on = await connect(ctx.db.worker_url, server_settings={"synchronous_commit": "on"})
        off = await connect(ctx.db.worker_url, server_settings={"synchronous_commit": "off"})
        variants = {
            "pool, synchronous_commit=on (as the worker claims)": Leases(pool, "bench", 60),
            "connection, synchronous_commit=on": Leases(on, "bench", 60),
            "connection, synchronous_commit=off": Leases(off, "bench", 60),
        }
        timings: dict[str, list[float]] = {name: [] for name in variants}
        timings["connection, SELECT 1 (one round trip)"] = []
        rows = iter(ids)
        try:
            for i in range(samples):
                names = list(variants)
                names = names[i % len(names) :] + names[: i % len(names)]  # rotate the order
                for name in names:
                    outbox_id = next(rows)
                    began = time.perf_counter_ns()
                    claimed = await variants[name].claim_ids([outbox_id], "notify")
                    timings[name].append((time.perf_counter_ns() - began) / 1e6)
                    assert claimed and claimed[0].fate == "send", claimed
                began = time.perf_counter_ns()
                await on.fetchval("SELECT 1")
                timings["connection, SELECT 1 (one round trip)"].append(
                    (time.perf_counter_ns() - began) / 1e6
                )
        finally:
            await on.close()
            await off.close()
            await pool.close()
    await empty_tables(ctx.monitor)
    return {name: _dist(values) for name, values in timings.items()}


# -- one mode ----------------------------------------------------------------------------------


def _receipts(path: Path) -> dict[uuid.UUID, int]:
    """Verification id -> when the sink first had its message (wall clock, ns)."""
    found: dict[uuid.UUID, int] = {}
    if not path.exists():
        return found
    for line in path.read_text(encoding="ascii", errors="replace").splitlines():
        message_id, _, at = line.rpartition(" ")
        match = _VERIFICATION_ID.search(message_id)
        if match is None:
            continue
        vid = uuid.UUID(match.group(1))
        found.setdefault(vid, int(at))
    return found


@dataclass(slots=True)
class _Segment:
    """One round of one mode: its idle and loaded windows, and what the load produced."""

    idle: Usage
    load: Usage
    produced: Produced
    delivered: int
    times: dict[uuid.UUID, RowTimes]
    receipts: dict[uuid.UUID, int]


async def _segment(ctx: _Run, spec: ModeSpec, round_number: int) -> _Segment:
    cfg, slug = ctx.config, _slug(spec.name)
    name = f"{slug}-r{round_number + 1}"
    what = f"latency: {spec.name}, round {round_number + 1}"
    await empty_tables(ctx.monitor)
    record = ctx.log_dir / f"sink-{name}.txt"
    sink_argv = [PYTHON, "-m", "benchmarks.sink", "--record", str(record)]
    drain_timeout = (spec.poll_interval or 0.0) + DRAIN_GRACE_SECONDS
    async with contextlib.AsyncExitStack() as stack:
        sink = await stack.enter_async_context(
            started(f"sink-{name}", sink_argv, log_dir=ctx.log_dir, ready="ready")
        )
        port = int(next(line for line in sink.stdout if line.startswith("ready")).split()[1])
        worker_spec = WorkerSpec(
            mode=spec.mode, poll_interval=spec.poll_interval, transport="smtp", smtp_port=port
        )
        with ctx.progress.phase(f"{what}: start workers", 2.5):
            workers = await stack.enter_async_context(
                running_workers(worker_spec, ctx.db, cfg.latency_workers, ctx.log_dir, name)
            )
        meter = Meter(ctx.monitor, ctx.db, [w.pid for w in workers])
        with ctx.progress.phase(f"{what}: idle", cfg.settle_seconds + cfg.idle_seconds):
            await anyio.sleep(cfg.settle_seconds)
            before = await meter.snapshot()
            await anyio.sleep(cfg.idle_seconds)
            idle = usage(before, await meter.snapshot())
        with ctx.progress.phase(f"{what}: load", cfg.warmup_seconds + cfg.load_seconds + 1.5):
            warmup = await produce_steady(
                ctx.producer, rate=cfg.rate, seconds=cfg.warmup_seconds, tag=f"{name}-warmup"
            )
            await wait_until_done(ctx.monitor, drain_timeout)
            before = await meter.snapshot()
            produced = await produce_steady(
                ctx.producer, rate=cfg.rate, seconds=cfg.load_seconds, tag=name
            )
            after = await meter.snapshot()
            load = usage(before, after, other_transactions=len(produced.commits))
            sent = await wait_until_done(ctx.monitor, drain_timeout)
    # The workers and the sink have stopped: the sink's receipts are on disk.
    times = await row_times(ctx.monitor, list(produced.commits))
    return _Segment(idle, load, produced, sent - len(warmup.commits), times, _receipts(record))


def _mode_result(ctx: _Run, spec: ModeSpec, segments: list[_Segment]) -> dict[str, Any]:
    to_claim: list[float] = []
    to_smtp: list[float] = []
    discovered: Counter[str | None] = Counter()
    lateness_ms: list[float] = []
    for segment in segments:
        for vid, committed in segment.produced.commits.items():
            row = segment.times.get(vid)
            if row is not None and row.claimed_us is not None:
                to_claim.append((row.claimed_us * 1000 - committed) / 1e6)
            if vid in segment.receipts:
                to_smtp.append((segment.receipts[vid] - committed) / 1e6)
        discovered.update(t.discovered_by for t in segment.times.values())
        lateness_ms += segment.produced.lateness_ms
    produced = sum(len(s.produced.commits) for s in segments)
    delivered = sum(s.delivered for s in segments)
    load = combine([s.load for s in segments])
    workers = ctx.config.latency_workers
    load_json = load.as_json(workers)
    if produced > 0:
        load_json["statements_per_delivery"] = (
            None if load.statements is None else round(load.statements / produced, 3)
        )
        load_json["round_trips_per_delivery"] = round(load.round_trips / produced, 3)
    lateness = distribution(lateness_ms)
    return {
        "mode": spec.name,
        "worker_mode": spec.mode,
        "poll_interval_s": spec.poll_interval,
        "workers": workers,
        "produced": produced,
        "delivered": delivered,
        "received_by_sink": len(to_smtp),
        "producer_stopped_behind": any(s.produced.stopped_behind for s in segments),
        "producer_lateness_ms": None
        if lateness is None
        else {"p50": lateness.p50, "p99": lateness.p99, "max": lateness.max},
        "discovered_by": {str(k): v for k, v in discovered.items()},
        "commit_to_claim_ms": _dist(to_claim),
        "commit_to_smtp_ms": _dist(to_smtp),
        # Per round, to see whether one stretch of noise dominated.
        "rounds_claim_p50_ms": [_round_p50(s, claim=True) for s in segments],
        "rounds_smtp_p50_ms": [_round_p50(s, claim=False) for s in segments],
        "idle": combine([s.idle for s in segments]).as_json(workers),
        "load": load_json,
    }


def _round_p50(segment: _Segment, *, claim: bool) -> float | None:
    values = []
    for vid, committed in segment.produced.commits.items():
        if claim:
            row = segment.times.get(vid)
            if row is not None and row.claimed_us is not None:
                values.append((row.claimed_us * 1000 - committed) / 1e6)
        elif vid in segment.receipts:
            values.append((segment.receipts[vid] - committed) / 1e6)
    found = distribution(values)
    return None if found is None else found.p50
