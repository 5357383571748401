"""One soak run, phase by phase: set up, load under faults, drain, collect, check, report.

Set up: a PostgreSQL of the run's own in the chosen topology, migrated; the misbehaving
mail server; the API and the workers as real `notifier` processes. Load under faults: the
requests go in at a steady pace while workers are killed and terminated, LISTEN connections
cut, the database restarted (or failed over) once and the mail server misbehaves. Drain:
faults stop, every worker runs, and every row must become terminal within the drain timeout.
Then everything is read and checked.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import anyio
import httpx
from rich.console import Console

from notifier import apikeys
from tests.soak.checks import Findings, check_all
from tests.soak.evidence import collect
from tests.soak.faults import FaultInjector
from tests.soak.load import LoadStats, plan_requests, run_load
from tests.soak.monitor import Backlog, sample_backlog, wait_drained
from tests.soak.processes import ProcessFailed, Slot, run_once
from tests.soak.report import Timings, failover_gap, render, summary_rows, write_json
from tests.soak.settings import SoakSettings
from tests.soak.topology import SoakDatabase, soak_database
from tests.support.ports import free_port
from tests.support.smtp_server import SmtpServer

# Seconds the API may take to answer /readyz with 200 after it starts.
API_READY_TIMEOUT_SECONDS = 30.0
# Seconds each process gets to stop cleanly at the end.
FINAL_STOP_TIMEOUT_SECONDS = 30.0
# How often a progress line is printed during the run, seconds.
PROGRESS_INTERVAL_SECONDS = 10.0


async def run_soak(settings: SoakSettings, console: Console, run_dir: Path) -> Findings:
    """Run the soak with its files in `run_dir`; print the summary, write summary.json
    there, and return what the checks found. Raises ProcessFailed when the product could not
    be run at all, TopologyUnavailable when the machine lacks the topology's servers."""
    began = time.monotonic()
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    console.print(
        f"soak: {settings.count} verifications, {settings.workers} workers, "
        f"seed {settings.seed}, {settings.topology} topology; files in {run_dir}"
    )
    with soak_database(settings.topology, run_dir) as database:
        return await _run(settings, console, database, run_dir, began)


async def _run(
    settings: SoakSettings,
    console: Console,
    database: SoakDatabase,
    run_dir: Path,
    began: float,
) -> Findings:
    logs = run_dir / "logs"
    url = database.probe_url
    # One listener per worker slot: each transaction names the slot that sent it.
    smtp = SmtpServer(listeners=settings.workers, slow_reply_seconds=settings.slow_reply_seconds)
    smtp.start()
    injector = FaultInjector(settings, [], database, settings.seed)
    stats = LoadStats(plan_requests(settings.count, secrets.token_hex(3)))
    backlog = Backlog()
    setup_seconds = load_seconds = 0.0
    drained_in: float | None = None
    try:
        await run_once(["migrate"], settings.common_env(database.env), logs / "migrate.log")
        # The soak's client key, registered as a deployment would provision one.
        api_key = apikeys.generate().key
        await run_once(
            ["keys", "create", "soak", "--scope", "request", "--key-from-env", "SOAK_API_KEY"],
            {**settings.common_env(database.env), "SOAK_API_KEY": api_key},
            logs / "keys.log",
        )
        api_port, public_port = free_port(), free_port()
        api_url = f"http://127.0.0.1:{api_port}"
        async with anyio.create_task_group() as watchers:
            api = Slot(
                "api", 0, settings.api_env(database.env, api_port, public_port), logs, watchers
            )
            workers = [
                Slot("worker", i, settings.worker_env(database.env, smtp.ports[i]), logs, watchers)
                for i in range(settings.workers)
            ]
            injector.workers = workers
            try:
                await api.start()
                await _wait_api_ready(api_url)
                for slot in workers:
                    await slot.start()
                setup_seconds = time.monotonic() - began
                console.print(f"soak: set up in {setup_seconds:.1f}s; load and faults begin")

                sampled = anyio.Event()
                async with anyio.create_task_group() as background:
                    background.start_soon(sample_backlog, url, backlog, sampled)
                    background.start_soon(_progress, console, stats, backlog, injector, sampled)
                    background.start_soon(injector.supervise, [api, *workers], sampled)
                    load_began = time.monotonic()
                    stop_faults = anyio.Event()
                    restart_database = anyio.Event()
                    smtp.set_random_faults(settings.smtp_faults, settings.seed)
                    async with anyio.create_task_group() as faulting:
                        faulting.start_soon(injector.run, stop_faults, restart_database)
                        await run_load(
                            api_url,
                            api_key,
                            stats,
                            settings.rate,
                            settings.request_concurrency,
                            time.monotonic() + settings.duration,
                            progress=restart_database,
                            progress_at=max(1, int(settings.count * settings.pg_restart_at)),
                        )
                        stop_faults.set()
                    smtp.set_random_faults({}, settings.seed)
                    faults_stopped = time.monotonic()
                    load_seconds = faults_stopped - load_began
                    console.print(f"soak: faults stopped after {load_seconds:.1f}s; draining")
                    await injector.ensure_running()
                    remaining = settings.drain_timeout - (time.monotonic() - faults_stopped)
                    if await wait_drained(url, settings.count, max(0.0, remaining)) is not None:
                        drained_in = time.monotonic() - faults_stopped
                    sampled.set()
                for slot in [*workers, api]:
                    await slot.stop(FINAL_STOP_TIMEOUT_SECONDS)
            finally:
                for slot in [api, *workers]:
                    slot.kill_now()
        evidence = await collect(url, run_dir / "dump")
    finally:
        smtp.stop()

    haystacks = [*sorted(logs.glob("*.log")), *database.log_paths, *evidence.dump_paths]
    findings = check_all(
        settings,
        evidence,
        smtp.transactions,
        [i for slot in workers for i in slot.incarnations],
        api.incarnations,
        stats,
        injector,
        drained_in,
        haystacks,
    )
    timings = Timings(
        setup_seconds,
        load_seconds,
        drained_in,
        time.monotonic() - began,
        failover_gap(injector.events, evidence, smtp.transactions),
    )
    sections = summary_rows(settings, findings, injector, stats, backlog, timings)
    render(console, sections, findings)
    write_json(run_dir / "summary.json", sections, findings)
    console.print(
        f"soak: {'all invariants held' if findings.ok else 'VIOLATIONS'}; "
        f"summary in {run_dir / 'summary.json'}"
    )
    return findings


async def _wait_api_ready(api_url: str) -> None:
    deadline = time.monotonic() + API_READY_TIMEOUT_SECONDS
    async with httpx.AsyncClient(base_url=api_url, timeout=5.0) as client:
        while time.monotonic() < deadline:
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await anyio.sleep(0.1)
    raise ProcessFailed(f"the API at {api_url} was not ready in {API_READY_TIMEOUT_SECONDS:g}s")


async def _progress(
    console: Console,
    stats: LoadStats,
    backlog: Backlog,
    injector: FaultInjector,
    stop: anyio.Event,
) -> None:
    while not stop.is_set():
        with anyio.move_on_after(PROGRESS_INTERVAL_SECONDS):
            await stop.wait()
        last = backlog.last
        console.print(
            f"soak: {stats.accepted}/{len(stats.requests)} accepted, "
            f"{last.open if last else '?'} open, {len(injector.events)} faults injected"
        )
