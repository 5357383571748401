"""The workers under test: real `notifier worker` processes, configured only by NOTIFIER_*.

Anything a spec leaves unset stays at the library default, so a figure measured with an
empty spec is what a user gets out of the box.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from benchmarks.cluster import BenchDatabase
from benchmarks.processes import Child, started
from benchmarks.producer import MAIL_FROM, TOKEN_SECRET
from benchmarks.sink import HOST
from notifier.config import WorkerSettings
from tests.support.cli import NOTIFIER, cli_env

WORKER = [*NOTIFIER, "worker"]
# The project root, so `-m notifier` runs this checkout (or PYTHONPATH's, if set).
PROJECT_ROOT = Path(__file__).resolve().parents[1]
# The line a worker logs once it listens (or polls).
READY_LINE = "delivering"
# The library's default sends in flight (NOTIFIER_CONCURRENCY).
DEFAULT_CONCURRENCY = WorkerSettings().concurrency

Mode = Literal["notify", "poll"]
TransportKind = Literal["smtp", "null"]


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """How the measured workers are configured; None means the library default."""

    mode: Mode = "notify"
    poll_interval: float | None = None
    transport: TransportKind = "smtp"
    smtp_port: int | None = None
    concurrency: int | None = None
    batch_size: int | None = None
    smtp_pool_size: int | None = None
    sweep_interval: float | None = None
    # Any other settings, as (variable, value) pairs (the events scenario's webhooks).
    extra: tuple[tuple[str, str], ...] = ()

    def env(self, db: BenchDatabase) -> dict[str, str]:
        settings = {
            "NOTIFIER_DATABASE_URL": db.worker_url,
            "NOTIFIER_TOKEN_SECRET": TOKEN_SECRET,
            "NOTIFIER_MAIL_FROM": MAIL_FROM,
            "NOTIFIER_MODE": self.mode,
            "NOTIFIER_TRANSPORT": self.transport,
            "NOTIFIER_SMTP_HOST": HOST,
            "NOTIFIER_SMTP_TLS": "none",
        }
        optional = {
            "NOTIFIER_POLL_INTERVAL": self.poll_interval,
            "NOTIFIER_SMTP_PORT": self.smtp_port,
            "NOTIFIER_CONCURRENCY": self.concurrency,
            # Every benchmark recipient is at one domain, which the per-domain share of the
            # send slots (half of them by default) would halve; real signups span domains,
            # so a domain may hold every slot here and the engine is what is measured.
            "NOTIFIER_DOMAIN_CONCURRENCY": self.concurrency or DEFAULT_CONCURRENCY,
            "NOTIFIER_BATCH_SIZE": self.batch_size,
            "NOTIFIER_SMTP_POOL_SIZE": self.smtp_pool_size,
            "NOTIFIER_SWEEP_INTERVAL": self.sweep_interval,
        }
        settings.update({k: str(v) for k, v in optional.items() if v is not None})
        settings.update(dict(self.extra))
        return cli_env(settings)

    def as_json(self) -> dict[str, Any]:
        """The settings as the workers saw them (defaults spelled out as None)."""
        return {
            "mode": self.mode,
            "poll_interval_s": self.poll_interval,
            "transport": self.transport,
            "concurrency": self.concurrency,
            "batch_size": self.batch_size,
            "smtp_pool_size": self.smtp_pool_size,
            "sweep_interval_s": self.sweep_interval,
        }


@contextlib.asynccontextmanager
async def running_workers(
    spec: WorkerSpec,
    db: BenchDatabase,
    count: int,
    log_dir: Path,
    name: str,
    command: Sequence[str] = WORKER,
) -> AsyncIterator[list[Child]]:
    """`count` worker processes, each ready (listening or polling), stopped with SIGTERM.
    `command` runs one (`notifier worker` unless told otherwise)."""
    env = spec.env(db)
    async with contextlib.AsyncExitStack() as stack:
        children = [
            await stack.enter_async_context(
                started(
                    f"{name}-worker{i}",
                    command,
                    log_dir=log_dir,
                    ready=READY_LINE,
                    env=env,
                    cwd=PROJECT_ROOT,
                )
            )
            for i in range(count)
        ]
        yield children
