"""python -m benchmarks.soak [--quick] [--count N] [--workers N] [--seed N] [--duration S] ...

Exits 0 when every invariant held, 1 on any violation, 2 when the product could not be run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import anyio
from rich.console import Console

from benchmarks.soak.runner import run_soak
from benchmarks.soak.settings import SoakSettings
from benchmarks.soak.topology import TOPOLOGIES


def parse(argv: Sequence[str] | None = None) -> SoakSettings:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description="Deliver verifications through the real processes under injected faults "
        "and check that nothing is lost, stuck or sent twice unexplained.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI's size: about 300 verifications, under 2 minutes"
    )
    parser.add_argument("--count", type=int, help="verifications to request (default 5000)")
    parser.add_argument("--workers", type=int, help="worker processes (default 3)")
    parser.add_argument("--seed", type=int, help="seed for every random choice (default 1)")
    parser.add_argument("--rate", type=float, help="requests per second (default 40)")
    parser.add_argument(
        "--duration",
        type=float,
        help="cap on the load-and-fault phase, seconds; requests not accepted by then are "
        "violations (default 900)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        help="seconds after faults stop within which every row must be terminal (default 120)",
    )
    parser.add_argument(
        "--run-dir", type=Path, help="where to keep the database, logs and summary.json"
    )
    parser.add_argument(
        "--topology",
        choices=TOPOLOGIES,
        help="single: the embedded server, restarted once (default); failover: a primary and "
        "a streaming replica, failed over once instead; pgbouncer: pools through PgBouncer in "
        "transaction mode, LISTEN through it in session mode, the server restarted behind it",
    )
    args = parser.parse_args(argv)
    settings = SoakSettings.quick() if args.quick else SoakSettings()
    overrides = {
        "count": args.count,
        "workers": args.workers,
        "seed": args.seed,
        "rate": args.rate,
        "duration": args.duration,
        "drain_timeout": args.drain_timeout,
        "run_dir": args.run_dir,
        "topology": args.topology,
    }
    settings = dataclasses.replace(
        settings, **{k: v for k, v in overrides.items() if v is not None}
    )
    if settings.count < 1 or settings.workers < 1 or settings.rate <= 0:
        parser.error("--count, --workers and --rate must be positive")
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse(argv)
    # platformdirs (through pgserver) warns when XDG_RUNTIME_DIR is unset; not ours to fix.
    warnings.filterwarnings("ignore", module="platformdirs")
    console = Console(width=120)
    return anyio.run(run_soak, settings, console, backend="asyncio")


if __name__ == "__main__":
    sys.exit(main())
