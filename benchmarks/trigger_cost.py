"""Scenario 4: what the NOTIFY trigger costs an inserting application.

PostgreSQL serialises the commits of notifying transactions (PreCommit_Notify takes a
cluster-wide lock held until after the commit record is flushed), so group commit cannot
help them. This measures commit rate with 1 and N concurrent producers, with the trigger
enabled and disabled, alternating in rounds; a LISTEN connection consumes the notifications
as a worker would. Two workloads:

- "request": each transaction is what `request_verification` sends (the product's own
  statement from its query catalogue: request_v4, which locks, checks suppression and the
  limits, inserts and supersedes), committing by itself;
- "insert": each transaction is a single statement writing a verification and its outbox
  row, the worst case, where the commit is most of the work.

The producers are pgbench clients (C), so the client's own CPU barely dilutes what the server
does; without pgbench, asyncpg connections in this process run the "insert" statement.
"""

from __future__ import annotations

import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import asyncpg

from benchmarks.cluster import BenchDatabase, empty_tables
from benchmarks.config import RunConfig
from benchmarks.processes import started
from benchmarks.progress import RunProgress
from notifier.delivery.listener import CHANNEL
from notifier.storage.database import connect
from notifier.storage.queries import sql

PYTHON = sys.executable
TRIGGER = "email_outbox_notify_v1"
SET_TRIGGER = "ALTER TABLE notifier.email_outbox {} TRIGGER " + TRIGGER
# The triggers that write a verification's events (schema 0015): every user trigger on it.
SET_EVENT_TRIGGERS = "ALTER TABLE notifier.verifications {} TRIGGER USER"
# One request's writes, as one statement and one transaction: a verification and its outbox
# row, whose insert fires the trigger (when enabled).
INSERT_ONE = """
WITH verification AS (
    INSERT INTO notifier.verifications
        (id, user_id, email, purpose, token_key_id, token_nonce, token_hash, expires_at)
    SELECT id, 'trigger-' || id, 'trigger-' || id || '@example.com', 'signup', 'benchkey',
           sha256(convert_to(gen_random_uuid()::text, 'UTF8')),
           sha256(convert_to(id::text, 'UTF8')),
           now() + interval '1 hour'
    FROM (SELECT gen_random_uuid() AS id) AS generated
    RETURNING id
)
INSERT INTO notifier.email_outbox (verification_id, message_id, max_attempts)
SELECT id, '<verify.' || id || '@bench.example.com>', 5 FROM verification;
"""
# What request_verification sends for a request without an idempotency key, with
# each parameter given as an SQL expression over pgbench's per-transaction random :n.
_USER = "('trq-' || :n)"
_EMAIL = "('trq-' || :n || '@example.com')"
_VERIFICATION_ID = "md5('trq-' || :n)::uuid"
REQUEST_STATEMENTS: tuple[tuple[str, dict[int, str]], ...] = (
    (
        "request_verification",
        {
            1: _VERIFICATION_ID,
            2: _USER,
            3: _EMAIL,
            4: _EMAIL,  # its canonical mailbox
            5: _EMAIL,  # its suppression key
            6: "'signup'",
            7: "NULL",  # locale
            8: "'benchkey'",
            9: "sha256(convert_to('nonce-' || :n, 'UTF8'))",
            10: "sha256(convert_to('hash-' || :n, 'UTF8'))",
            11: "3600",
            12: "('<verify.' || " + _VERIFICATION_ID + " || '@bench.example.com>')",
            13: "5",
            14: "NULL",  # traceparent
            15: "NULL",
            16: "NULL",  # no idempotency key
            17: "NULL",
            18: "ARRAY[]::bytea[]",
            19: "86400",
            20: "NULL",  # the library call: no client
            21: "1000000",
            22: "3600",
            23: "ARRAY[]::text[]",  # no shared budgets: the trigger's cost is what is measured
            24: "ARRAY[]::bytea[]",
            25: "ARRAY[]::integer[]",
            26: "60",
            27: "NULL",  # replaces nothing
            28: "NULL",  # no return_to
            29: "'link'",  # a link: no code to hash
            30: "NULL",
            31: "NULL",
            32: "6",
            33: "600",
        },
    ),
)
_PARAMETER = re.compile(r"\$(\d+)")
_COMMENT = re.compile(r"--[^\n]*")


def _fill(name: str, values: dict[int, str]) -> str:
    text = _COMMENT.sub("", sql(name)).strip().rstrip(";")
    return _PARAMETER.sub(lambda m: values[int(m.group(1))], text) + ";"


def request_script() -> str:
    """The pgbench script of one request: the product's statements, parameters filled in."""
    lines = ["\\set n random(1, 9000000000000000000)"]
    # One statement that commits by itself, as the library call does outside a transaction.
    for name, values in REQUEST_STATEMENTS:
        lines.append(_fill(name, values))
    return "\n".join(lines) + "\n"


WORKLOADS = ("request", "insert")
_TPS = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")
# Seconds pgbench may run beyond its own duration before it counts as hung.
PGBENCH_MARGIN_SECONDS = 60.0


def _pgbench(db: BenchDatabase) -> str | None:
    bin_dir = db.server.bin_dir
    if bin_dir is not None and (bin_dir / "pgbench").exists():
        return str(bin_dir / "pgbench")
    return shutil.which("pgbench")


async def _with_pgbench(
    pgbench: str, db: BenchDatabase, script: Path, producers: int, seconds: float
) -> float:
    argv = [
        pgbench,
        "-n",
        "-M",
        "prepared",
        "-c",
        str(producers),
        "-j",
        str(min(producers, 2)),
        "-T",
        str(max(1, round(seconds))),
        "-f",
        str(script),
        db.admin_url,
    ]
    with anyio.fail_after(seconds + PGBENCH_MARGIN_SECONDS):
        done = await anyio.run_process(argv, check=False)
    output = done.stdout.decode(errors="replace")
    match = _TPS.search(output)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"pgbench failed ({done.returncode}):\n{output}\n{done.stderr.decode()}")
    return float(match.group(1))


async def _with_asyncpg(db: BenchDatabase, producers: int, seconds: float) -> float:
    conns = [await asyncpg.connect(db.admin_url) for _ in range(producers)]
    counts = [0] * producers
    deadline = time.perf_counter() + seconds

    async def produce(i: int) -> None:
        while time.perf_counter() < deadline:
            await conns[i].execute(INSERT_ONE)
            counts[i] += 1

    started_at = time.perf_counter()
    try:
        async with anyio.create_task_group() as tg:
            for i in range(producers):
                tg.start_soon(produce, i)
    finally:
        for conn in conns:
            await conn.close()
    return sum(counts) / (time.perf_counter() - started_at)


async def run(
    db: BenchDatabase, config: RunConfig, log_dir: Path, progress: RunProgress
) -> dict[str, Any]:
    pgbench = _pgbench(db)
    workloads = WORKLOADS if pgbench is not None else ("insert",)
    rates: dict[tuple[str, int, bool], list[float]] = {
        (w, n, on): [] for w in workloads for n in config.trigger_producers for on in (True, False)
    }
    monitor = await connect(db.admin_url, server_settings={"application_name": "bench-monitor"})
    record = log_dir / "trigger-notifications.txt"
    argv = [PYTHON, "-m", "benchmarks.floor", "--url", db.admin_url, "--channel", CHANNEL,
            "--record", str(record)]  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as tmp:
            scripts = {"request": Path(tmp) / "request.sql", "insert": Path(tmp) / "insert.sql"}
            scripts["request"].write_text(request_script(), encoding="utf-8")
            scripts["insert"].write_text(INSERT_ONE, encoding="utf-8")
            # The outbox trigger's cost alone: the event triggers (their own NOTIFY and
            # rows) are measured by the events scenario, and stay off here in both arms.
            await monitor.execute(SET_EVENT_TRIGGERS.format("DISABLE"))
            # Nothing left over from earlier phases for a checkpoint to write mid-measurement.
            await monitor.execute("CHECKPOINT")
            async with started("trigger-listener", argv, log_dir=log_dir, ready="ready"):
                for round_number in range(config.trigger_rounds):
                    # Alternate which goes first, so a drift over time favours neither.
                    order = (True, False) if round_number % 2 == 0 else (False, True)
                    for workload in workloads:
                        for producers in config.trigger_producers:
                            for trigger_on in order:
                                rate = await _measure(
                                    monitor, db, config, progress, pgbench, scripts[workload],
                                    workload, producers, trigger_on, round_number,
                                )  # fmt: skip
                                rates[(workload, producers, trigger_on)].append(rate)
    finally:
        await monitor.execute(SET_TRIGGER.format("ENABLE"))
        await monitor.execute(SET_EVENT_TRIGGERS.format("ENABLE"))
        await empty_tables(monitor)
        await monitor.close()
    runs = []
    for workload in workloads:
        for producers in config.trigger_producers:
            on, off = rates[(workload, producers, True)], rates[(workload, producers, False)]
            with_trigger, without = statistics.median(on), statistics.median(off)
            runs.append(
                {
                    "workload": workload,
                    "producers": producers,
                    "commits_per_s_with_trigger": round(with_trigger, 1),
                    "commits_per_s_without_trigger": round(without, 1),
                    "overhead_pct": round((1 - with_trigger / without) * 100, 2),
                    "rounds_with_trigger": [round(r, 1) for r in on],
                    "rounds_without_trigger": [round(r, 1) for r in off],
                }
            )
    return {
        "client": "pgbench" if pgbench else "asyncpg",
        "seconds_per_run": config.trigger_seconds,
        "rounds": config.trigger_rounds,
        "workloads": {
            "request": "request_verification's one statement (request_v3), committing by itself",
            "insert": " ".join(INSERT_ONE.split()),
        },
        "runs": runs,
    }


async def _measure(
    monitor: Any,
    db: BenchDatabase,
    config: RunConfig,
    progress: RunProgress,
    pgbench: str | None,
    script: Path,
    workload: str,
    producers: int,
    trigger_on: bool,
    round_number: int,
) -> float:
    label = "on" if trigger_on else "off"
    with progress.phase(
        f"trigger: {workload}, {producers} producer(s), trigger {label}, round {round_number + 1}",
        config.trigger_seconds + 0.7,
    ):
        await empty_tables(monitor)
        await monitor.execute(SET_TRIGGER.format("ENABLE" if trigger_on else "DISABLE"))
        if pgbench is not None:
            return await _with_pgbench(pgbench, db, script, producers, config.trigger_seconds)
        return await _with_asyncpg(db, producers, config.trigger_seconds)
