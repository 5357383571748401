"""`notifier worker`, observed from inside: when each claim came back and each send was accepted.

`python -m benchmarks.observed_worker --record-dir DIR` runs the worker exactly as
`notifier worker` does (the same settings from NOTIFIER_*, the same `run_worker`), and notes
two moments on the wall clock (`time.time_ns()`, the clock the producers read after COMMIT):

- **claim committed**: when the claim statement's reply reached the worker. A claim is one
  autocommit statement, so its reply comes after its COMMIT is durable: from that moment the
  worker holds the lease and could start SMTP (a queue's "handler start"). It is taken from
  the worker's own "claimed" signal, which fires as soon as the claim returns to the worker's
  code (after the pool has reset and taken back the connection it ran on). The claim's
  `claimed_at` column is the statement's start (`now()`), before it locked, updated and
  committed anything, so it is not this moment.
- **SMTP accepted**: when the transport's send returned "sent", i.e. the server's 250 reply
  to the end of DATA reached the worker. The worker builds its transport inside
  `run_worker`; this module wraps `notifier.runner.transport_from_settings` so the real
  transport is used, with a clock read after each send.

Each costs a dict insert and a clock read per delivery, against about a millisecond of work.
At exit (SIGTERM, after the worker stopped gracefully) the process writes
`DIR/worker-PID.txt`: lines `claimed OUTBOX_ID NS` and `accepted MESSAGE_ID NS`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from notifier import events, runner
from notifier.config import DatabaseSettings
from notifier.delivery.mailer import Transport
from notifier.event_loop import run_service
from notifier.events import WorkerEvent
from notifier.logs import configure_logging
from notifier.storage.database import database_url

RECORD_PREFIX = "worker-"


class Recorder:
    """The moments one worker process observed, kept in memory until it exits (a worker
    Observer: told of each claim as it happens)."""

    def __init__(self) -> None:
        self.claimed: dict[int, int] = {}  # outbox id -> ns
        self.accepted: dict[str, int] = {}  # Message-ID -> ns

    def notice(self, event: WorkerEvent) -> None:
        if isinstance(event, events.Claimed):
            # A retried row is claimed again; its first claim is the one measured.
            self.claimed.setdefault(event.id, time.time_ns())

    def write(self, path: Path) -> None:
        with path.open("w", encoding="utf-8") as out:
            for outbox_id, at in self.claimed.items():
                out.write(f"claimed {outbox_id} {at}\n")
            for message_id, at in self.accepted.items():
                out.write(f"accepted {message_id} {at}\n")


class TimedTransport:
    """The worker's own transport, with the wall clock read when a send is accepted."""

    def __init__(self, inner: Transport, accepted: dict[str, int]) -> None:
        self.inner = inner
        self.accepted = accepted

    @property
    def span_attributes(self) -> dict[str, str | int]:
        return self.inner.span_attributes

    @property
    def capacity(self) -> int | None:
        return self.inner.capacity

    async def send(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        result = await self.inner.send(message, *args, **kwargs)
        if result.outcome == "sent":
            self.accepted.setdefault(message.message_id, time.time_ns())
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


# What notifier.runner.run_worker calls to build its transport.
TRANSPORT_FACTORY = "transport_from_settings"


def time_sends(recorder: Recorder) -> None:
    """Make run_worker's transport a TimedTransport around the one it would have built."""
    build: Callable[..., Transport] | None = getattr(runner, TRANSPORT_FACTORY, None)
    if build is None:
        raise RuntimeError(
            f"notifier.runner has no {TRANSPORT_FACTORY}: update benchmarks/observed_worker.py "
            "to wrap wherever run_worker now builds its transport"
        )

    def timed(*args: Any, **kwargs: Any) -> Transport:
        return TimedTransport(build(*args, **kwargs), recorder.accepted)

    setattr(runner, TRANSPORT_FACTORY, timed)


def command(record_dir: Path) -> list[str]:
    """The argv that runs one observed worker recording into `record_dir`."""
    return [sys.executable, "-m", "benchmarks.observed_worker", "--record-dir", str(record_dir)]


@dataclass(slots=True)
class Observations:
    """What every observed worker of a run recorded, merged (earliest moment wins)."""

    claimed: dict[int, int] = field(default_factory=dict)  # outbox id -> ns
    accepted: dict[str, int] = field(default_factory=dict)  # Message-ID -> ns
    files: int = 0

    def add(self, lines: Iterable[str]) -> None:
        for line in lines:
            parts = line.split()
            if len(parts) != 3:
                continue
            kind, key, at = parts
            if kind == "claimed":
                self._keep(self.claimed, int(key), int(at))
            elif kind == "accepted":
                self._keep(self.accepted, key, int(at))

    @staticmethod
    def _keep(into: dict[Any, int], key: Any, at: int) -> None:
        if key not in into or at < into[key]:
            into[key] = at

    def by_verification(
        self, keys: Iterable[tuple[int, str, uuid.UUID]]
    ) -> tuple[dict[uuid.UUID, int], dict[uuid.UUID, int]]:
        """Claim-committed and SMTP-accepted moments by verification id, given each outbox
        row's (id, Message-ID, verification id)."""
        claimed: dict[uuid.UUID, int] = {}
        accepted: dict[uuid.UUID, int] = {}
        for outbox_id, message_id, verification_id in keys:
            if outbox_id in self.claimed:
                claimed[verification_id] = self.claimed[outbox_id]
            if message_id in self.accepted:
                accepted[verification_id] = self.accepted[message_id]
        return claimed, accepted


def read_observations(record_dir: Path) -> Observations:
    found = Observations()
    for path in sorted(record_dir.glob(f"{RECORD_PREFIX}*.txt")):
        found.add(path.read_text(encoding="utf-8").splitlines())
        found.files += 1
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="notifier worker, with claim and send times.")
    parser.add_argument("--record-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    # As `notifier worker` logs: JSON at INFO (the runner waits for its "delivering" line).
    configure_logging("json", logging.INFO)
    recorder = Recorder()
    time_sends(recorder)
    config = runner.WorkerConfig.from_env()
    with database_url(DatabaseSettings.from_env()) as url:
        # The loop `notifier worker` runs on.
        run_service(runner.run_worker, url, config, recorder)
    recorder.write(args.record_dir / f"{RECORD_PREFIX}{os.getpid()}.txt")


if __name__ == "__main__":
    main()
