"""Scenario 3: draining a backlog with 1 and 2 worker processes, to an SMTP sink and to the
null transport, and the ceiling a bare aiosmtplib loop reaches into the same sink.

A drain starts idle workers, commits the whole backlog in one statement (its trigger
announces every id) and ends when the last row is sent: deliveries per second is rows over
COMMIT-returned to the last completion (database clock). Round trips per delivery are the
workers' statements over the drain (pg_stat_statements) divided by the rows.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from benchmarks.cluster import BenchDatabase, empty_tables
from benchmarks.config import RunConfig, ThroughputProfile, drain_budget
from benchmarks.cost import Meter, usage
from benchmarks.outbox import discovery_counts, drain_span, wait_until_done
from benchmarks.processes import Child, started
from benchmarks.producer import insert_backlog
from benchmarks.progress import RunProgress
from benchmarks.sink import HOST, SMTP_SINK_BACKLOG, smtp_sink_path
from benchmarks.workers import TransportKind, WorkerSpec, running_workers
from notifier.storage.database import connect
from tests.support.ports import free_port

PYTHON = sys.executable
# Seconds to wait for a sink's port to accept connections.
SINK_READY_SECONDS = 10.0
# Seconds a baseline loop may overrun its own duration before it counts as hung.
BASELINE_MARGIN_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Sink:
    kind: str
    port: int


async def _wait_port(port: int, within: float) -> None:
    with anyio.fail_after(within):
        while True:
            try:
                stream = await anyio.connect_tcp(HOST, port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


@contextlib.asynccontextmanager
async def running_sink(log_dir: Path, name: str) -> AsyncIterator[Sink]:
    """postfix's smtp-sink when installed (fast, C), else the recording sink."""
    path = smtp_sink_path()
    if path is None:
        argv = [PYTHON, "-m", "benchmarks.sink"]
        async with started(name, argv, log_dir=log_dir, ready="ready") as child:
            port = int(next(line for line in child.stdout if line.startswith("ready")).split()[1])
            yield Sink("benchmarks.sink (Python asyncio)", port)
        return
    port = free_port()
    # As root, smtp-sink must be told whom to run as once its socket is open.
    user = ["-u", "nobody"] if os.geteuid() == 0 else []
    argv = [path, *user, f"{HOST}:{port}", str(SMTP_SINK_BACKLOG)]
    async with started(name, argv, log_dir=log_dir, ready=None):
        await _wait_port(port, SINK_READY_SECONDS)
        yield Sink("postfix smtp-sink", port)


async def run(
    db: BenchDatabase, config: RunConfig, log_dir: Path, progress: RunProgress
) -> dict[str, Any]:
    monitor = await connect(db.admin_url, server_settings={"application_name": "bench-monitor"})
    drains: list[dict[str, Any]] = []
    # The bare loop is measured before the drains and after each profile's, and its median
    # round is the ceiling: on a shared machine one ten-second figure can be off by half.
    rounds: dict[int, list[dict[str, Any]]] = {p: [] for p in config.throughput_processes}

    async def baseline_round() -> None:
        for processes in config.throughput_processes:
            rounds[processes].append(await _smtp_baseline(config, log_dir, progress, processes))

    try:
        await baseline_round()
        for profile in config.throughput_profiles:
            for transport in config.throughput_transports:
                if transport not in profile.transports:
                    continue
                for processes in config.throughput_processes:
                    drains.append(
                        await _drain(
                            monitor, db, config, log_dir, progress, profile, transport, processes
                        )
                    )
            await baseline_round()
    finally:
        await monitor.close()
    baseline = [_median_round(rounds[p]) for p in config.throughput_processes]
    return {"rows": config.backlog_rows, "drains": drains, "smtp_baseline": baseline}


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median rate, naming every round's rate."""
    ordered = sorted(rounds, key=lambda r: r["messages_per_s"])
    rates = [r["messages_per_s"] for r in rounds]
    return {**ordered[(len(ordered) - 1) // 2], "rounds_per_s": rates}


async def _drain(
    monitor: Any,
    db: BenchDatabase,
    config: RunConfig,
    log_dir: Path,
    progress: RunProgress,
    profile: ThroughputProfile,
    transport: TransportKind,
    processes: int,
) -> dict[str, Any]:
    rows = config.backlog_rows
    slug = re.sub(r"[^a-z0-9]+", "-", profile.name.lower()).strip("-")
    name = f"drain-{slug}-{transport}-{processes}p"
    await empty_tables(monitor)
    budget = drain_budget(config, transport, processes)
    with progress.phase(
        f"throughput: {transport}, {processes} process(es), {profile.name}", budget
    ):
        async with contextlib.AsyncExitStack() as stack:
            sink: Sink | None = None
            if transport == "smtp":
                sink = await stack.enter_async_context(running_sink(log_dir, f"{name}-sink"))
            spec = WorkerSpec(
                mode="notify",
                transport=transport,
                smtp_port=None if sink is None else sink.port,
                concurrency=profile.concurrency,
                batch_size=profile.batch_size,
                smtp_pool_size=profile.smtp_pool_size,
            )
            workers: list[Child] = await stack.enter_async_context(
                running_workers(spec, db, processes, log_dir, name)
            )
            meter = Meter(monitor, db, [w.pid for w in workers])
            # The start-up sweeps have run and found nothing: the backlog is announced by
            # its trigger like any insert.
            await anyio.sleep(config.settle_seconds)
            before = await meter.snapshot()
            committed_ns = await insert_backlog(monitor, rows, name)
            sent = await wait_until_done(monitor, config.drain_timeout)
            after = await meter.snapshot()
        span = await drain_span(monitor)
        discovered = await discovery_counts(monitor)
    used = usage(before, after)

    def since_commit(us: int | None) -> float | None:
        return None if us is None else round((us * 1000 - committed_ns) / 1e9, 4)

    seconds = since_commit(span.last_completion_us)
    return {
        "profile": profile.name,
        "transport": transport,
        "processes": processes,
        "sink": None if sink is None else sink.kind,
        "settings": spec.as_json(),
        "rows": rows,
        "sent": sent,
        "attempts": span.attempts,
        "seconds": seconds,
        "deliveries_per_s": None if not seconds else round(sent / seconds, 1),
        # When half, and 99%, of the rows were done: a slow tail shows against `seconds`.
        "seconds_to_half": since_commit(span.half_completion_us),
        "seconds_to_99pct": since_commit(span.p99_completion_us),
        "discovered_by": discovered,
        "statements_per_delivery": None
        if used.statements is None
        else round(used.statements / max(1, sent), 4),
        "round_trips_per_delivery": round(used.round_trips / max(1, sent), 4),
        "usage": used.as_json(processes),
    }


async def _smtp_baseline(
    config: RunConfig, log_dir: Path, progress: RunProgress, processes: int
) -> dict[str, Any]:
    """Bare aiosmtplib loops, `processes` of them, into a fresh sink of the same kind."""
    seconds = config.smtp_baseline_seconds
    connections = config.smtp_baseline_connections
    with progress.phase(f"throughput: bare aiosmtplib, {processes} process(es)", seconds + 2):
        async with contextlib.AsyncExitStack() as stack:
            sink = await stack.enter_async_context(
                running_sink(log_dir, f"baseline-{processes}p-sink")
            )
            argv = [
                PYTHON,
                "-m",
                "benchmarks.smtp_loop",
                "--port",
                str(sink.port),
                "--connections",
                str(connections),
                "--seconds",
                str(seconds),
            ]
            loops = [
                await stack.enter_async_context(
                    started(
                        f"baseline-{processes}p-loop{i}",
                        argv,
                        log_dir=log_dir,
                        ready="ready",
                        stdin=True,
                    )
                )
                for i in range(processes)
            ]
            for loop in loops:
                await loop.send_line("go")
            results = []
            with anyio.fail_after(seconds + BASELINE_MARGIN_SECONDS):
                for loop in loops:
                    line = await loop.wait_for_line("sent ")
                    _, count, elapsed = line.split()
                    results.append((int(count), float(elapsed)))
    rate = sum(count / elapsed for count, elapsed in results)
    return {
        "processes": processes,
        "connections_per_process": connections,
        "sink": sink.kind,
        "seconds": seconds,
        "messages": sum(count for count, _ in results),
        "messages_per_s": round(rate, 1),
    }
