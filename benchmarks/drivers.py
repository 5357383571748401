"""Scenario 6: the library call on each driver an app may hold, against the driver itself.

For each driver, 4 connections (as the request-path benchmark uses), each as fast as it
goes for a window: BEGIN, `request_verification` (or `request_verification_sync`, Django's
`contrib.django.request_verification`), COMMIT, as an app's signup transaction does. Beside
it the same transaction with the driver's own call of the same statement, its arguments made
beforehand: what the driver alone costs. The difference is what notifier adds on that
driver (validation, the keyed digests, the adapter), and should be about the same on every
driver. Async drivers run as 4 tasks on this process's event loop; sync ones as 4 threads,
each with its connection, as a threaded app server does. Rounds alternate the order.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import psycopg
import sqlalchemy

import notifier
from benchmarks.cluster import BenchDatabase, empty_tables
from benchmarks.config import RunConfig
from benchmarks.producer import policy
from benchmarks.progress import RunProgress
from notifier.storage.drivers import format_style, named_style
from notifier.storage.outbox import STATEMENT, _Prepared
from notifier.storage.queries import sql

CONNECTIONS = 4
# One connection's requests made beforehand for the driver-alone runs (None: the library
# call makes its own as it goes).
Alone = list[list[object]] | None
DRIVERS = ("asyncpg", "psycopg async", "psycopg", "SQLAlchemy, psycopg", "Django")


def _values(tag: str, i: int) -> list[object]:
    """A request's arguments, made the way the library call makes them."""
    prepared = _Prepared.of(user_id=f"{tag}-{i}", email=f"{tag}-{i}@example.com", policy=policy())
    return prepared.values(None, None)


def made_beforehand(count: int) -> list[list[list[object]]]:
    """For each connection, `count` requests' arguments, made before any clock starts: the
    driver-alone runs send them (the tables are emptied between runs, so they never clash)."""
    return [[_values(f"alone{n}", i) for i in range(count)] for n in range(CONNECTIONS)]


# -- one connection's loop, per driver and kind ----------------------------------------------


async def _asyncpg(url: str, tag: str, alone: Alone, until: float) -> int:
    conn = await asyncpg.connect(url)
    statement, done, full = sql(STATEMENT), 0, alone is None
    try:
        while time.monotonic() < until and (full or done < len(alone or ())):
            values = None if alone is None else alone[done]
            async with conn.transaction():
                if full:
                    await notifier.request_verification(
                        conn, user_id=f"{tag}-{done}", email=f"{tag}-{done}@example.com",
                        policy=policy(),
                    )  # fmt: skip
                else:
                    await conn.fetchrow(statement, *values)  # type: ignore[misc]
            done += 1
    finally:
        await conn.close()
    return done


async def _async_psycopg(url: str, tag: str, alone: Alone, until: float) -> int:
    conn = await psycopg.AsyncConnection.connect(url)
    statement, done = format_style(sql(STATEMENT)), 0
    try:
        while time.monotonic() < until and (alone is None or done < len(alone)):
            if alone is None:
                await notifier.request_verification(
                    conn, user_id=f"{tag}-{done}", email=f"{tag}-{done}@example.com",
                    policy=policy(),
                )  # fmt: skip
            else:
                await (await conn.execute(statement, alone[done])).fetchone()
            await conn.commit()
            done += 1
    finally:
        await conn.close()
    return done


def _psycopg(url: str, tag: str, alone: Alone, until: float) -> int:
    statement, done = format_style(sql(STATEMENT)), 0
    with psycopg.connect(url) as conn:
        while time.monotonic() < until and (alone is None or done < len(alone)):
            if alone is None:
                notifier.request_verification_sync(
                    conn, user_id=f"{tag}-{done}", email=f"{tag}-{done}@example.com",
                    policy=policy(),
                )  # fmt: skip
            else:
                conn.execute(statement, alone[done]).fetchone()
            conn.commit()
            done += 1
    return done


def _sqlalchemy(url: str, tag: str, alone: Alone, until: float) -> int:
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    clause, done = sqlalchemy.text(named_style(sql(STATEMENT))), 0
    try:
        with engine.connect() as conn:
            while time.monotonic() < until and (alone is None or done < len(alone)):
                with conn.begin():
                    if alone is None:
                        notifier.request_verification_sync(
                            conn, user_id=f"{tag}-{done}", email=f"{tag}-{done}@example.com",
                            policy=policy(),
                        )  # fmt: skip
                    else:
                        binds = {f"p{n}": v for n, v in enumerate(alone[done], 1)}
                        conn.execute(clause, binds).one()
                done += 1
    finally:
        engine.dispose()
    return done


def _django(url: str, tag: str, alone: Alone, until: float) -> int:
    from django.db import connections, transaction

    from notifier.contrib.django import request_verification
    from tests.support.app_drivers import _add_django_database

    alias = f"bench_{tag}"
    _add_django_database(alias, url)
    statement, done = format_style(sql(STATEMENT)), 0
    try:
        while time.monotonic() < until and (alone is None or done < len(alone)):
            with transaction.atomic(using=alias):
                if alone is None:
                    request_verification(
                        user_id=f"{tag}-{done}", email=f"{tag}-{done}@example.com",
                        policy=policy(), using=alias,
                    )  # fmt: skip
                else:
                    with connections[alias].cursor() as cursor:
                        cursor.execute(statement, alone[done])
                        cursor.fetchone()
            done += 1
    finally:
        connections[alias].close()
        del connections.settings[alias]
    return done


ASYNC: dict[str, Callable[[str, str, Alone, float], Awaitable[int]]] = {
    "asyncpg": _asyncpg,
    "psycopg async": _async_psycopg,
}
SYNC: dict[str, Callable[[str, str, Alone, float], int]] = {
    "psycopg": _psycopg,
    "SQLAlchemy, psycopg": _sqlalchemy,
    "Django": _django,
}


async def _calls_per_second(
    url: str, driver: str, alone: list[list[list[object]]] | None, seconds: float, tag: str
) -> float:
    """Calls a second over 4 connections: the library call, or (`alone`: each connection's
    arguments made beforehand) the driver's own call of the same statement."""
    counts = [0] * CONNECTIONS
    ends = [0.0] * CONNECTIONS
    started = time.monotonic()
    until = started + seconds
    if driver in ASYNC:
        loop = ASYNC[driver]

        async def one(n: int) -> None:
            counts[n] = await loop(url, f"{tag}{n}", None if alone is None else alone[n], until)
            ends[n] = time.monotonic()

        async with anyio.create_task_group() as tg:
            for n in range(CONNECTIONS):
                tg.start_soon(one, n)
    else:
        sync_loop = SYNC[driver]

        def thread(n: int) -> None:
            counts[n] = sync_loop(url, f"{tag}{n}", None if alone is None else alone[n], until)
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
    rates: dict[tuple[str, bool], list[float]] = {
        (d, f): [] for d in DRIVERS for f in (True, False)
    }
    with progress.phase("drivers: requests' arguments made beforehand", 3.0):
        beforehand = await anyio.to_thread.run_sync(made_beforehand, config.drivers_made)
    monitor = await asyncpg.connect(db.admin_url)
    try:
        for round_number in range(config.drivers_rounds):
            order = DRIVERS if round_number % 2 == 0 else tuple(reversed(DRIVERS))
            for driver in order:
                for full in (True, False) if round_number % 2 == 0 else (False, True):
                    what = "the library call" if full else "the driver alone"
                    with progress.phase(
                        f"drivers: {driver}, {what}, round {round_number + 1}",
                        config.drivers_seconds + 0.5,
                    ):
                        await empty_tables(monitor)
                        tag = f"d{round_number}{int(full)}{DRIVERS.index(driver)}"
                        rate = await _calls_per_second(
                            db.admin_url,
                            driver,
                            None if full else beforehand,
                            config.drivers_seconds,
                            tag,
                        )
                        rates[(driver, full)].append(rate)
    finally:
        await empty_tables(monitor)
        await monitor.close()
    reference = statistics.median(rates[("asyncpg", True)])
    runs = []
    for driver in DRIVERS:
        call = statistics.median(rates[(driver, True)])
        alone = statistics.median(rates[(driver, False)])
        runs.append(
            {
                "driver": driver,
                "calls_per_s": round(call, 1),
                "driver_alone_per_s": round(alone, 1),
                "call_vs_driver_alone": round(call / alone, 3),
                "call_vs_asyncpg_call": round(call / reference, 3),
                "added_us_per_call": round((1 / call - 1 / alone) * 1e6 * CONNECTIONS, 1),
                "rounds": [round(r, 1) for r in rates[(driver, True)]],
            }
        )
    return {
        "connections": CONNECTIONS,
        "seconds_per_run": config.drivers_seconds,
        "rounds": config.drivers_rounds,
        "transaction": "BEGIN; the request; COMMIT (each call its own signup transaction)",
        "runs": runs,
    }
