"""Scenario 7: what events cost, and how fast webhooks go out.

- The request path: the library call on asyncpg over 4 connections (as the drivers scenario
  runs it), with the triggers that write a verification's events on and off, rounds
  alternating. The request stays one statement either way: the triggers fire inside it.
- The delivery path: a backlog drained by one worker process to the null transport, with the
  trigger that writes a delivery's end (verification.sent, .failed) on and off; CPU seconds
  of the worker and of PostgreSQL per delivery, claim to completion. At the defaults (a
  claim takes at most 8 rows) and with batches of 200 (the throughput scenario's profile),
  since the events of a batch are written by one statement.
- Webhooks: one endpoint subscribed to verification.created, a backlog of verifications
  without outbox rows committed at once (so the worker's email side sends nothing), one
  worker process posting to a receiver in this process on loopback that answers at once:
  webhooks per second from the commit to the last one received, and how long each event
  took to arrive, at the default concurrency and at a wider one.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import asyncpg

from benchmarks import drivers
from benchmarks.cluster import BenchDatabase, empty_tables
from benchmarks.config import BATCH_PROFILE, DEFAULT_PROFILE, RunConfig, ThroughputProfile
from benchmarks.cost import Meter, usage
from benchmarks.outbox import wait_until_done
from benchmarks.producer import TOKEN_SECRET, insert_backlog, insert_verifications
from benchmarks.progress import RunProgress
from benchmarks.workers import WorkerSpec, running_workers
from notifier.storage import webhooks
from notifier.storage.database import connect
from notifier.tokens import TokenKeys
from tests.support.webhook_receiver import receiving

# The triggers of schema 0015 that write events, by the path they are on.
REQUEST_TRIGGERS = ("verifications", ("verifications_created", "verifications_changed"))
DELIVERY_TRIGGERS = ("email_outbox", ("deliveries_ended",))
WEBHOOK_PROFILES: tuple[tuple[str, dict[str, str]], ...] = (
    ("defaults", {}),
    (
        "16 in flight, 16 to the endpoint",
        {"NOTIFIER_WEBHOOK_CONCURRENCY": "16", "NOTIFIER_WEBHOOK_ENDPOINT_CONCURRENCY": "16"},
    ),
)


async def _set_triggers(conn: Any, triggers: tuple[str, tuple[str, ...]], on: bool) -> None:
    table, names = triggers
    for name in names:
        action = "ENABLE" if on else "DISABLE"
        # Identifiers from the constants above, never from input.
        await conn.execute(f"ALTER TABLE notifier.{table} {action} TRIGGER {name}")


async def run(
    db: BenchDatabase, config: RunConfig, log_dir: Path, progress: RunProgress
) -> dict[str, Any]:
    monitor = await connect(db.admin_url, server_settings={"application_name": "bench-monitor"})
    try:
        request = await _request_path(monitor, db, config, progress)
        delivery = [
            await _delivery_path(monitor, db, config, log_dir, progress, profile)
            for profile in (DEFAULT_PROFILE, BATCH_PROFILE)
        ]
        hooks = [
            await _webhooks(monitor, db, config, log_dir, progress, name, env)
            for name, env in WEBHOOK_PROFILES
        ]
    finally:
        await _set_triggers(monitor, REQUEST_TRIGGERS, True)
        await _set_triggers(monitor, DELIVERY_TRIGGERS, True)
        await empty_tables(monitor)
        await monitor.execute("DELETE FROM notifier.webhook_endpoints")
        await monitor.close()
    return {"request_path": request, "delivery_path": delivery, "webhooks": hooks}


async def _request_path(
    monitor: Any, db: BenchDatabase, config: RunConfig, progress: RunProgress
) -> dict[str, Any]:
    rates: dict[bool, list[float]] = {True: [], False: []}
    for round_number in range(config.events_rounds):
        for on in (True, False) if round_number % 2 == 0 else (False, True):
            label = "on" if on else "off"
            with progress.phase(
                f"events: the request path, events {label}, round {round_number + 1}",
                config.events_seconds + 0.5,
            ):
                await empty_tables(monitor)
                await _set_triggers(monitor, REQUEST_TRIGGERS, on)
                tag = f"ev{round_number}{int(on)}"
                rates[on].append(
                    await drivers._calls_per_second(
                        db.admin_url,
                        "asyncpg",
                        "call",
                        [[]] * drivers.CONNECTIONS,
                        config.events_seconds,
                        tag,
                    )
                )
    await _set_triggers(monitor, REQUEST_TRIGGERS, True)
    rate_on, rate_off = statistics.median(rates[True]), statistics.median(rates[False])
    return {
        "connections": drivers.CONNECTIONS,
        "seconds_per_run": config.events_seconds,
        "rounds": config.events_rounds,
        "calls_per_s_events_on": round(rate_on, 1),
        "calls_per_s_events_off": round(rate_off, 1),
        "cost_pct": round((1 - rate_on / rate_off) * 100, 2),
        "rounds_on": [round(r, 1) for r in rates[True]],
        "rounds_off": [round(r, 1) for r in rates[False]],
    }


async def _delivery_path(
    monitor: Any,
    db: BenchDatabase,
    config: RunConfig,
    log_dir: Path,
    progress: RunProgress,
    profile: ThroughputProfile,
) -> dict[str, Any]:
    per_delivery: dict[bool, list[float]] = {True: [], False: []}
    split: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    rows = config.events_rows
    spec = WorkerSpec(
        transport="null", concurrency=profile.concurrency, batch_size=profile.batch_size
    )
    for round_number in range(config.events_rounds):
        for on in (True, False) if round_number % 2 == 0 else (False, True):
            label = "on" if on else "off"
            name = f"events-delivery-{profile.concurrency or 0}-{label}-{round_number}"
            with progress.phase(
                f"events: delivery, {profile.name}, events {label}, round {round_number + 1}",
                rows / 500 + 10,
            ):
                await empty_tables(monitor)
                await _set_triggers(monitor, DELIVERY_TRIGGERS, on)
                async with running_workers(spec, db, 1, log_dir, name) as workers:
                    meter = Meter(monitor, db, [w.pid for w in workers])
                    await anyio.sleep(config.settle_seconds)
                    before = await meter.snapshot()
                    await insert_backlog(monitor, rows, name)
                    sent = await wait_until_done(monitor, config.drain_timeout)
                    after = await meter.snapshot()
                used = usage(before, after)
                cpu = used.worker_cpu_s + (used.pg_cpu_s or 0.0)
                per_delivery[on].append(cpu / max(sent, 1) * 1e6)
                split[on].append(
                    (
                        used.worker_cpu_s / max(sent, 1) * 1e6,
                        (used.pg_cpu_s or 0) / max(sent, 1) * 1e6,
                    )
                )
    await _set_triggers(monitor, DELIVERY_TRIGGERS, True)
    cpu_on = statistics.median(per_delivery[True])
    cpu_off = statistics.median(per_delivery[False])
    # The worker runs the same statements and gets the same rows either way, so its rounds
    # differ by noise alone; what the events add is PostgreSQL's work.
    pg_on = statistics.median(p for _, p in split[True])
    pg_off = statistics.median(p for _, p in split[False])
    return {
        "profile": profile.name,
        "rows": rows,
        "rounds": config.events_rounds,
        "cpu_us_per_delivery_events_on": round(cpu_on, 1),
        "cpu_us_per_delivery_events_off": round(cpu_off, 1),
        "ratio": round(cpu_on / cpu_off, 3),
        "pg_added_us": round(pg_on - pg_off, 1),
        "pg_added_pct": round((pg_on - pg_off) / cpu_off * 100, 2),
        "rounds_on": [round(r, 1) for r in per_delivery[True]],
        "rounds_off": [round(r, 1) for r in per_delivery[False]],
        # Each round's (worker, PostgreSQL) CPU µs per delivery.
        "split_on": [[round(w, 1), round(p, 1)] for w, p in split[True]],
        "split_off": [[round(w, 1), round(p, 1)] for w, p in split[False]],
    }


async def _webhooks(
    monitor: Any,
    db: BenchDatabase,
    config: RunConfig,
    log_dir: Path,
    progress: RunProgress,
    profile: str,
    env: dict[str, str],
) -> dict[str, Any]:
    rows = config.events_rows
    await empty_tables(monitor)
    await monitor.execute("DELETE FROM notifier.webhook_endpoints")
    extra = {"NOTIFIER_WEBHOOK_ALLOW_PRIVATE": "true", **env}
    spec = replace(WorkerSpec(transport="null"), extra=tuple(extra.items()))
    with progress.phase(f"events: {rows} webhooks, {profile}", rows / 200 + 15):
        async with contextlib.AsyncExitStack() as stack:
            receiver = await stack.enter_async_context(receiving())
            keys = TokenKeys((TOKEN_SECRET,))
            await webhooks.add(
                monitor, keys, receiver.url, ["verification.created"], allow_private=True
            )
            await stack.enter_async_context(
                running_workers(spec, db, 1, log_dir, f"events-webhooks-{len(env)}")
            )
            await anyio.sleep(config.settle_seconds)
            committed = time.time()
            await insert_verifications(monitor, rows, "webhooks")
            with anyio.fail_after(config.drain_timeout):
                while len(receiver.received) < rows:
                    await receiver.wait_for(len(receiver.received) + 1)
    latencies = await _latencies(monitor, receiver.received)
    seconds = max(r.at for r in receiver.received) - committed
    return {
        "profile": profile,
        "rows": rows,
        "received": len(receiver.received),
        "duplicates": len(receiver.received) - len({r.webhook_id for r in receiver.received}),
        "seconds": round(seconds, 3),
        "webhooks_per_s": round(rows / seconds, 1),
        "event_to_receipt_ms": latencies,
    }


async def _latencies(monitor: Any, received: list[Any]) -> dict[str, float]:
    """Percentiles of the time from each event (its occurred_at: the database's clock, on
    this machine) to its webhook's arrival here, ms."""
    rows: list[asyncpg.Record] = await monitor.fetch(
        "SELECT 'evt_' || replace(uid::text, '-', '') AS id, "
        "extract(epoch FROM occurred_at)::float8 AS at FROM notifier.events"
    )
    occurred = {r["id"]: r["at"] for r in rows}
    waits = sorted(
        (r.at - occurred[r.webhook_id]) * 1000 for r in received if r.webhook_id in occurred
    )
    if not waits:
        return {}
    return {
        "p50": round(waits[len(waits) // 2], 1),
        "p99": round(waits[min(len(waits) - 1, int(len(waits) * 0.99))], 1),
        "max": round(waits[-1], 1),
    }
