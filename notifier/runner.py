"""The composition root: builds the pool, transport and worker from settings, runs them."""

from __future__ import annotations

import logging
import os
import signal
import sys
from dataclasses import dataclass

import anyio

from notifier import migrations
from notifier.config import SmtpSettings, TokenSettings, WorkerSettings
from notifier.database import connect, create_pool
from notifier.errors import MigrationError
from notifier.mailer import transport_from_settings
from notifier.messages import Templates
from notifier.signals import Signals
from notifier.tokens import TokenKeys
from notifier.worker import Worker

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything a worker process is configured with, read and checked before it starts."""

    worker: WorkerSettings
    smtp: SmtpSettings
    tokens: TokenSettings
    templates: Templates

    @classmethod
    def from_env(cls) -> WorkerConfig:
        return cls(
            worker=WorkerSettings.from_env(),
            smtp=SmtpSettings.from_env(),
            tokens=TokenSettings.from_env(),
            templates=Templates.from_env(),
        )


async def require_current_schema(url: str) -> None:
    """Refuse to start on a database whose schema is behind this release."""
    conn = await connect(url)
    try:
        current = await migrations.status(conn, migrations.discover())
    finally:
        await conn.close()
    if current.pending:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in current.pending)
        raise MigrationError(f"the database lacks migrations {names}: run `notifier migrate` first")


async def run_worker(url: str, config: WorkerConfig, signals: Signals | None = None) -> None:
    """Run one worker until SIGTERM or SIGINT; a second signal exits at once."""
    await require_current_schema(url)
    pool = await create_pool(url)
    transport = transport_from_settings(config.worker.transport, config.smtp)
    try:
        worker = Worker(
            pool=pool,
            database_url=url,
            settings=config.worker,
            transport=transport,
            templates=config.templates,
            keys=TokenKeys(config.tokens.secrets),
            mail_from=config.smtp.mail_from,
            public_url=config.tokens.public_url,
            signals=signals,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, worker)
            await worker.run()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await transport.aclose()
            await pool.close()


async def stop_on_signals(worker: Worker) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
        async for signum in received:
            if not worker.stopping:
                log.info("%s: shutting down gracefully", signal.Signals(signum).name)
                worker.stop()
                continue
            # The second signal means now: leases held are left to expire on their own.
            log.warning("second signal: exiting at once; held leases will expire")
            logging.shutdown()
            sys.stderr.flush()
            os._exit(1)
