"""The floor: a bare LISTEN connection, noting when each notification arrives.

`python -m benchmarks.floor --url URL --channel C --record FILE` LISTENs on one asyncpg
connection (the same driver the worker uses, with nothing else to do), prints "ready", and
on SIGTERM writes one "TIME_NS PAYLOAD" line per notification to FILE. Commit to arrival on
this connection is what PostgreSQL itself allows; every worker figure is read against it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import asyncpg


async def listen(url: str, channel: str, record: Path) -> None:
    received: list[tuple[int, str]] = []

    def on_notification(conn: Any, pid: int, channel: str, payload: str) -> None:
        received.append((time.time_ns(), payload))

    conn = await asyncpg.connect(url, server_settings={"application_name": "bench-floor"})
    await conn.add_listener(channel, on_notification)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await conn.close()
    with record.open("w", encoding="utf-8") as out:
        for at, payload in received:
            out.write(f"{at} {payload}\n")
    print(f"received {len(received)}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A bare LISTEN connection.")
    parser.add_argument("--url", required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--record", type=Path, required=True)
    args = parser.parse_args(argv)
    asyncio.run(listen(args.url, args.channel, args.record))


if __name__ == "__main__":
    main()
