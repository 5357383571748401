"""One soak run, phase by phase: set up, load under faults, drain, collect, check, report.

Set up: a PostgreSQL of the run's own, migrated; the misbehaving mail server; the API and
the workers as real `notifier` processes. Load under faults: the requests go in at a steady
pace while workers are killed and terminated, LISTEN connections cut, the database
restarted once and the mail server misbehaves. Drain: faults stop, every worker runs, and
every row must become terminal within the drain timeout. Then everything is read and checked.
"""

from __future__ import annotations

import secrets
import socket
import tempfile
import time
from pathlib import Path

import anyio
import httpx
from rich.console import Console

from benchmarks.soak.checks import check_all
from benchmarks.soak.evidence import collect
from benchmarks.soak.faults import FaultInjector
from benchmarks.soak.load import LoadStats, plan_requests, run_load
from benchmarks.soak.monitor import Backlog, sample_backlog, wait_drained
from benchmarks.soak.postgres import SoakPostgres
from benchmarks.soak.processes import ProcessFailed, Slot, run_once
from benchmarks.soak.report import Timings, render, summary_rows, write_json
from benchmarks.soak.settings import SoakSettings
from benchmarks.soak.smtp import FaultySmtp, MailLog
from notifier import apikeys

# Seconds the API may take to answer /readyz with 200 after it starts.
API_READY_TIMEOUT_SECONDS = 30.0
# Seconds each process gets to stop cleanly at the end.
FINAL_STOP_TIMEOUT_SECONDS = 30.0
# How often a progress line is printed during the run, seconds.
PROGRESS_INTERVAL_SECONDS = 10.0

EXIT_OK = 0
EXIT_VIOLATIONS = 1
EXIT_BROKEN = 2


async def run_soak(settings: SoakSettings, console: Console) -> int:
    """Run the soak; the exit status: 0 all invariants held, 1 violations, 2 it broke."""
    began = time.monotonic()
    run_dir = settings.run_dir or Path(tempfile.mkdtemp(prefix="notifier-soak-"))
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    console.print(
        f"soak: {settings.count} verifications, {settings.workers} workers, "
        f"seed {settings.seed}; files in {run_dir}"
    )
    postgres = SoakPostgres(run_dir / "pg")
    url = await anyio.to_thread.run_sync(postgres.start)
    mail = MailLog(settings.smtp_faults, settings.seed, settings.slow_reply_seconds)
    smtp = FaultySmtp(settings.workers, mail)
    smtp.start()
    injector = FaultInjector(settings, [], postgres, settings.seed)
    stats = LoadStats(plan_requests(settings.count, secrets.token_hex(3)))
    backlog = Backlog()
    setup_seconds = load_seconds = 0.0
    drained_in: float | None = None
    try:
        await run_once(["migrate"], settings.common_env(url), logs / "migrate.log")
        # The soak's client key, registered as a deployment would provision one.
        api_key = apikeys.generate().key
        await run_once(
            ["keys", "create", "soak", "--scope", "request", "--key-from-env", "SOAK_API_KEY"],
            {**settings.common_env(url), "SOAK_API_KEY": api_key},
            logs / "keys.log",
        )
        api_port, public_port = _free_port(), _free_port()
        api_url = f"http://127.0.0.1:{api_port}"
        async with anyio.create_task_group() as watchers:
            api = Slot("api", 0, settings.api_env(url, api_port, public_port), logs, watchers)
            workers = [
                Slot("worker", i, settings.worker_env(url, smtp.ports[i]), logs, watchers)
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
                    mail.set_faults(True)
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
                    mail.set_faults(False)
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
    except ProcessFailed as exc:
        console.print(f"[red]soak: could not run the product:[/red] {exc}")
        return EXIT_BROKEN
    finally:
        smtp.stop()
        await anyio.to_thread.run_sync(postgres.stop)

    haystacks = [*sorted(logs.glob("*.log")), postgres.log_path, *evidence.dump_paths]
    findings = check_all(
        settings,
        evidence,
        mail.transactions,
        [i for slot in workers for i in slot.incarnations],
        api.incarnations,
        stats,
        injector,
        drained_in,
        haystacks,
    )
    timings = Timings(setup_seconds, load_seconds, drained_in, time.monotonic() - began)
    sections = summary_rows(settings, findings, injector, stats, backlog, timings)
    render(console, sections, findings)
    write_json(run_dir / "summary.json", sections, findings)
    console.print(
        f"soak: {'all invariants held' if findings.ok else 'VIOLATIONS'}; "
        f"summary in {run_dir / 'summary.json'}"
    )
    return EXIT_OK if findings.ok else EXIT_VIOLATIONS


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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
