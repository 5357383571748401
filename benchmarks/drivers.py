"""Scenario 6: the library call on each driver an app may hold, against the driver itself.

For each driver, 4 connections (as the request-path benchmark uses), each as fast as it
goes for a window: BEGIN, `request_verification` (or `request_verification_sync`, Django's
`contrib.django.request_verification`), COMMIT, as an app's signup transaction does. Beside
it two runs of the same transaction on arguments made beforehand: through the adapter
notifier picks for the connection, and with the driver's own call of the same statement
(what the driver alone costs). The adapter should cost about nothing beyond the driver; the
library call adds validation and the keyed digests, the same work on every driver. Async
drivers run as 4 tasks on this process's event loop; sync ones as 4 threads, each with its
connection, as a threaded app server does. Rounds alternate the order.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import asyncpg
import psycopg
import sqlalchemy

import notifier
from benchmarks.cluster import BenchDatabase, empty_tables
from benchmarks.config import RunConfig
from benchmarks.producer import policy
from benchmarks.progress import RunProgress
from notifier.storage.drivers import async_runner, format_style, named_style, sync_runner
from notifier.storage.outbox import STATEMENT, _Prepared
from notifier.storage.queries import sql

CONNECTIONS = 4
# What a run times: the library call (it makes its own arguments as it goes), the adapter
# (the runner notifier picks for the connection, on arguments made beforehand), or the driver
# alone (its own call of the same statement, on arguments made beforehand).
Mode = Literal["call", "adapter", "alone"]
MODES: tuple[Mode, ...] = ("call", "adapter", "alone")
WHAT = {"call": "the library call", "adapter": "the adapter", "alone": "the driver alone"}
# One connection's requests made beforehand (empty for the library call).
Made = list[list[object]]
DRIVERS = ("asyncpg", "psycopg async", "psycopg", "SQLAlchemy, psycopg", "Django")


def _values(tag: str, i: int) -> list[object]:
    """A request's arguments, made the way the library call makes them."""
    prepared = _Prepared.of(user_id=f"{tag}-{i}", email=f"{tag}-{i}@example.com", policy=policy())
    return prepared.values(None, None)


def made_beforehand(count: int, tag: str) -> list[Made]:
    """For each connection, `count` requests' arguments, made before any clock starts (the
    tables are emptied between runs, so runs sending them never clash)."""
    return [[_values(f"{tag}{n}", i) for i in range(count)] for n in range(CONNECTIONS)]


def _more(mode: Mode, done: int, made: Made, until: float) -> bool:
    return time.monotonic() < until and (mode == "call" or done < len(made))


def _call_args(tag: str, done: int) -> dict[str, Any]:
    return {"user_id": f"{tag}-{done}", "email": f"{tag}-{done}@example.com", "policy": policy()}


# -- one connection's loop, per driver ------------------------------------------------------


async def _asyncpg(url: str, tag: str, mode: Mode, made: Made, until: float) -> int:
    conn = await asyncpg.connect(url)
    statement, done, runner = sql(STATEMENT), 0, async_runner(conn)
    try:
        while _more(mode, done, made, until):
            async with conn.transaction():
                if mode == "call":
                    await notifier.request_verification(conn, **_call_args(tag, done))
                elif mode == "adapter":
                    await runner.fetch_one(statement, made[done])
                else:
                    await conn.fetchrow(statement, *made[done])
            done += 1
    finally:
        await conn.close()
    return done


async def _async_psycopg(url: str, tag: str, mode: Mode, made: Made, until: float) -> int:
    conn = await psycopg.AsyncConnection.connect(url)
    statement, done, runner = sql(STATEMENT), 0, async_runner(conn)
    try:
        while _more(mode, done, made, until):
            if mode == "call":
                await notifier.request_verification(conn, **_call_args(tag, done))
            elif mode == "adapter":
                await runner.fetch_one(statement, made[done])
            else:
                await (await conn.execute(format_style(statement), made[done])).fetchone()
            await conn.commit()
            done += 1
    finally:
        await conn.close()
    return done


def _psycopg(url: str, tag: str, mode: Mode, made: Made, until: float) -> int:
    statement, done = sql(STATEMENT), 0
    with psycopg.connect(url) as conn:
        runner = sync_runner(conn)
        while _more(mode, done, made, until):
            if mode == "call":
                notifier.request_verification_sync(conn, **_call_args(tag, done))
            elif mode == "adapter":
                runner.fetch_one(statement, made[done])
            else:
                conn.execute(format_style(statement), made[done]).fetchone()
            conn.commit()
            done += 1
    return done


def _sqlalchemy(url: str, tag: str, mode: Mode, made: Made, until: float) -> int:
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    statement, done = sql(STATEMENT), 0
    clause = sqlalchemy.text(named_style(statement))
    try:
        with engine.connect() as conn:
            runner = sync_runner(conn)
            while _more(mode, done, made, until):
                with conn.begin():
                    if mode == "call":
                        notifier.request_verification_sync(conn, **_call_args(tag, done))
                    elif mode == "adapter":
                        runner.fetch_one(statement, made[done])
                    else:
                        binds = {f"p{n}": v for n, v in enumerate(made[done], 1)}
                        conn.execute(clause, binds).one()
                done += 1
    finally:
        engine.dispose()
    return done


def _django(url: str, tag: str, mode: Mode, made: Made, until: float) -> int:
    from django.db import connections, transaction

    from notifier.contrib.django import request_verification
    from notifier.storage.drivers.django_runner import DjangoRunner
    from tests.support.app_drivers import _add_django_database

    alias = f"bench_{tag}"
    _add_django_database(alias, url)
    statement, done, runner = sql(STATEMENT), 0, DjangoRunner(connections[alias])
    try:
        while _more(mode, done, made, until):
            with transaction.atomic(using=alias):
                if mode == "call":
                    request_verification(**_call_args(tag, done), using=alias)
                elif mode == "adapter":
                    runner.fetch_one(statement, made[done])
                else:
                    with connections[alias].cursor() as cursor:
                        cursor.execute(format_style(statement), made[done])
                        cursor.fetchone()
            done += 1
    finally:
        connections[alias].close()
        del connections.settings[alias]
    return done


ASYNC: dict[str, Callable[[str, str, Mode, Made, float], Awaitable[int]]] = {
    "asyncpg": _asyncpg,
    "psycopg async": _async_psycopg,
}
SYNC: dict[str, Callable[[str, str, Mode, Made, float], int]] = {
    "psycopg": _psycopg,
    "SQLAlchemy, psycopg": _sqlalchemy,
    "Django": _django,
}


async def _calls_per_second(
    url: str, driver: str, mode: Mode, made: list[Made], seconds: float, tag: str
) -> float:
    """Calls a second over 4 connections, timing `mode` (`made`: each connection's
    arguments made beforehand, for the adapter and the driver alone)."""
    counts = [0] * CONNECTIONS
    ends = [0.0] * CONNECTIONS
    started = time.monotonic()
    until = started + seconds
    if driver in ASYNC:
        loop = ASYNC[driver]

        async def one(n: int) -> None:
            counts[n] = await loop(url, f"{tag}{n}", mode, made[n], until)
            ends[n] = time.monotonic()

        async with anyio.create_task_group() as tg:
            for n in range(CONNECTIONS):
                tg.start_soon(one, n)
    else:
        sync_loop = SYNC[driver]

        def thread(n: int) -> None:
            counts[n] = sync_loop(url, f"{tag}{n}", mode, made[n], until)
            ends[n] = time.monotonic()

        threads = [threading.Thread(target=thread, args=(n,)) for n in range(CONNECTIONS)]

        def run_all() -> None:
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        await anyio.to_thread.run_sync(run_all)
    return sum(counts) / (max(ends) - started)


async def run(
    db: BenchDatabase, config: RunConfig, log_dir: Path, progress: RunProgress
) -> dict[str, Any]:
    rates: dict[tuple[str, Mode], list[float]] = {(d, m): [] for d in DRIVERS for m in MODES}
    with progress.phase("drivers: requests' arguments made beforehand", 3.0):
        beforehand = await anyio.to_thread.run_sync(made_beforehand, config.drivers_made, "made")
    nothing: list[Made] = [[] for _ in range(CONNECTIONS)]
    monitor = await asyncpg.connect(db.admin_url)
    try:
        for round_number in range(config.drivers_rounds):
            forward = round_number % 2 == 0
            for driver in DRIVERS if forward else tuple(reversed(DRIVERS)):
                for mode in MODES if forward else tuple(reversed(MODES)):
                    with progress.phase(
                        f"drivers: {driver}, {WHAT[mode]}, round {round_number + 1}",
                        config.drivers_seconds + 0.5,
                    ):
                        await empty_tables(monitor)
                        rate = await _calls_per_second(
                            db.admin_url,
                            driver,
                            mode,
                            nothing if mode == "call" else beforehand,
                            config.drivers_seconds,
                            f"d{round_number}{MODES.index(mode)}{DRIVERS.index(driver)}",
                        )
                        rates[(driver, mode)].append(rate)
    finally:
        await empty_tables(monitor)
        await monitor.close()
    reference = statistics.median(rates[("asyncpg", "call")])
    runs = []
    for driver in DRIVERS:
        call, adapter, alone = (statistics.median(rates[(driver, m)]) for m in MODES)
        runs.append(
            {
                "driver": driver,
                "calls_per_s": round(call, 1),
                "adapter_per_s": round(adapter, 1),
                "driver_alone_per_s": round(alone, 1),
                "adapter_vs_driver_alone": round(adapter / alone, 3),
                "call_vs_driver_alone": round(call / alone, 3),
                "call_vs_asyncpg_call": round(call / reference, 3),
                "adapter_added_us_per_call": _added_us(adapter, alone),
                "added_us_per_call": _added_us(call, alone),
                "rounds": {m: [round(r, 1) for r in rates[(driver, m)]] for m in MODES},
            }
        )
    return {
        "connections": CONNECTIONS,
        "seconds_per_run": config.drivers_seconds,
        "rounds": config.drivers_rounds,
        "transaction": "BEGIN; the request; COMMIT (each call its own signup transaction)",
        "runs": runs,
    }


def _added_us(rate: float, alone: float) -> float:
    """What one call at `rate` costs beyond one at `alone`, in µs of a connection's time."""
    return round((1 / rate - 1 / alone) * 1e6 * CONNECTIONS, 1)
