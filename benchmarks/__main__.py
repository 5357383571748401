"""`python -m benchmarks [--quick] [--out DIR] [--only SCENARIO ...]`: measure, then report.

Without NOTIFIER_DATABASE_URL the run starts a PostgreSQL cluster of its own (and deletes
it afterwards); with it, the run creates and drops a database and a role on that server,
which must let the URL's user do both (a superuser).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import anyio

from benchmarks import (
    drivers,
    events,
    latency,
    machine,
    report,
    sustained,
    throughput,
    trigger_cost,
)
from benchmarks.cluster import bench_database, open_server
from benchmarks.config import (
    FULL,
    QUICK,
    QUICK_SUSTAINED_CASES,
    SCENARIOS,
    SUSTAINED_CASES,
    RunConfig,
    Scenario,
)
from benchmarks.progress import RunProgress

RESULTS_DIR = Path(__file__).resolve().parent / "results"
QUICK_RESULTS_DIR = RESULTS_DIR / "quick"
# Seconds budgeted on the progress bar for starting the server and migrating.
STARTUP_BUDGET_SECONDS = 5.0

RUNNERS = {
    "latency": latency.run,
    "throughput": throughput.run,
    "trigger": trigger_cost.run,
    "sustained": sustained.run,
    "drivers": drivers.run,
    "events": events.run,
}


async def measure(config: RunConfig, out_dir: Path, url: str | None) -> dict[str, Any]:
    """Run the configured scenarios; every figure in one dict (see README for its schema)."""
    log_dir = out_dir / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    results: dict[str, Any] = {"quick": config.quick, "config": config.as_json(), "errors": {}}
    began = time.monotonic()
    budget = sum(config.planned_seconds().values()) + STARTUP_BUDGET_SECONDS
    with RunProgress(budget) as progress:
        async with contextlib.AsyncExitStack() as stack, anyio.create_task_group() as tg:
            tg.start_soon(progress.tick)
            with progress.phase("starting PostgreSQL", STARTUP_BUDGET_SECONDS):
                server = await stack.enter_async_context(open_server(url))
                db = await stack.enter_async_context(bench_database(server))
            results["machine"] = machine.describe(server)
            for scenario in config.scenarios:
                try:
                    results[scenario] = await RUNNERS[scenario](db, config, log_dir, progress)
                except Exception as exc:
                    progress.log(f"[red]{scenario} failed:[/red] {exc}")
                    results["errors"][scenario] = "".join(traceback.format_exception(exc))
            tg.cancel_scope.cancel()
    results["duration_s"] = round(time.monotonic() - began, 1)
    results["log_dir"] = str(log_dir)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="notifier: latency, throughput, cost and sustained load, in one run.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run (about 2 minutes) with short phases"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"where results go (default: {RESULTS_DIR}, or {QUICK_RESULTS_DIR} with --quick)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SCENARIOS,
        help="run only these scenarios (default: all)",
    )
    tuning = parser.add_argument_group("overrides (for exploring; the defaults are the run's)")
    tuning.add_argument("--rate", type=float, help="verifications per second (latency)")
    tuning.add_argument("--load-seconds", type=float, help="load window per mode")
    tuning.add_argument("--idle-seconds", type=float, help="idle window per mode")
    tuning.add_argument("--rows", type=int, help="backlog rows per drain (throughput)")
    tuning.add_argument("--trigger-seconds", type=float, help="length of one trigger run")
    tuning.add_argument("--trigger-rounds", type=int, help="alternating trigger rounds")
    tuning.add_argument(
        "--sustained-seconds", type=float, help="window of a sustained run that names none"
    )
    tuning.add_argument(
        "--case",
        nargs="+",
        choices=[case.name for case in SUSTAINED_CASES + QUICK_SUSTAINED_CASES],
        help="run only these sustained cases (by name, e.g. library-max-1w, http-max-1w-1api)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    config = QUICK if args.quick else FULL
    if args.only:
        chosen: tuple[Scenario, ...] = tuple(s for s in SCENARIOS if s in args.only)
        config = config.with_scenarios(chosen)
    overrides = {
        "rate": args.rate,
        "load_seconds": args.load_seconds,
        "idle_seconds": args.idle_seconds,
        "backlog_rows": args.rows,
        "trigger_seconds": args.trigger_seconds,
        "trigger_rounds": args.trigger_rounds,
        "sustained_seconds": args.sustained_seconds,
    }
    config = dataclasses.replace(config, **{k: v for k, v in overrides.items() if v is not None})
    if args.case:
        cases = {case.name: case for case in SUSTAINED_CASES + QUICK_SUSTAINED_CASES}
        config = dataclasses.replace(config, sustained_cases=tuple(cases[n] for n in args.case))
    out_dir = args.out or (QUICK_RESULTS_DIR if args.quick else RESULTS_DIR)
    url = os.environ.get("NOTIFIER_DATABASE_URL") or None
    results = anyio.run(measure, config, out_dir, url, backend="asyncio")
    for path in report.write(results, out_dir):
        print(path)
    if results["errors"]:
        print(f"failed scenarios: {', '.join(results['errors'])}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
