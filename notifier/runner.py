"""The composition root: builds the pool, transport and worker from settings, runs them."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn

from notifier import migrations
from notifier.api import create_app
from notifier.config import (
    ApiSettings,
    DatabaseSettings,
    RetentionSettings,
    SmtpSettings,
    TokenSettings,
    WorkerSettings,
)
from notifier.database import ONE_SHOT_CACHE, connect, create_pool
from notifier.errors import ConfigError, MigrationError
from notifier.mailer import Transport, transport_from_settings
from notifier.maintenance import run_periodically
from notifier.messages import Templates
from notifier.signals import Signals
from notifier.telemetry import QueueHealth, Telemetry, WorkerMetrics
from notifier.tokens import TokenKeys
from notifier.verifications import Policy
from notifier.worker import Worker

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything a worker process is configured with, read and checked before it starts."""

    worker: WorkerSettings
    smtp: SmtpSettings
    tokens: TokenSettings
    templates: Templates
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)

    @classmethod
    def from_env(cls) -> WorkerConfig:
        return cls(
            database=DatabaseSettings.from_env(),
            worker=WorkerSettings.from_env(),
            smtp=SmtpSettings.from_env(),
            tokens=TokenSettings.from_env(),
            templates=Templates.from_env(),
            retention=RetentionSettings.from_env(),
        )


async def require_current_schema(url: str) -> None:
    """Refuse to start on a database whose schema is behind this release."""
    conn = await connect(url, statement_cache_size=ONE_SHOT_CACHE)
    try:
        current = await migrations.status(conn, migrations.discover())
    finally:
        await conn.close()
    if current.pending:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in current.pending)
        raise MigrationError(f"the database lacks migrations {names}: run `notifier migrate` first")


def build_worker(
    listen_url: str,
    pool: Any,
    config: WorkerConfig,
    transport: Transport,
    signals: Signals | None = None,
) -> Worker:
    """A worker whose statements go through `pool` and whose LISTEN goes to `listen_url`."""
    return Worker(
        pool=pool,
        database_url=listen_url,
        settings=config.worker,
        transport=transport,
        templates=config.templates,
        keys=TokenKeys(config.tokens.secrets),
        mail_from=config.smtp.mail_from,
        public_url=config.tokens.public_url,
        signals=signals,
    )


async def run_worker(url: str, config: WorkerConfig, signals: Signals | None = None) -> None:
    """Run one worker until SIGTERM or SIGINT; a second signal exits at once."""
    await require_current_schema(url)
    telemetry = Telemetry.configure("notifier-worker")
    pool = await create_pool(url, statement_cache_size=config.database.statement_cache_size)
    transport = transport_from_settings(config.worker.transport, config.smtp)
    signals = signals or Signals()
    signals.subscribe(WorkerMetrics())
    try:
        worker = build_worker(config.database.listen_url_for(url), pool, config, transport, signals)
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, [worker.stop])
            if telemetry.meter_provider is not None:
                health = QueueHealth(pool)
                health.register_gauges()
                tg.start_soon(health.run)
            tg.start_soon(run_periodically, pool, config.retention)
            await worker.run()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await transport.aclose()
            await pool.close()
            # Spans and metrics still buffered go out now (blocking, so off the loop).
            await anyio.to_thread.run_sync(telemetry.shutdown)


class QuietServer(uvicorn.Server):
    """uvicorn without signal handlers of its own: notifier's signal watcher stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop(self) -> None:
        self.should_exit = True


def http_server(app: Any, settings: ApiSettings) -> QuietServer:
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        # uvicorn's access log would print /verify?token=... : links must never reach logs.
        access_log=False,
        server_header=False,
        lifespan="on",
    )
    return QuietServer(config)


def listen(settings: ApiSettings) -> socket.socket:
    """The API's listening socket, bound before serving so a taken port is a clear error."""
    try:
        return socket.create_server((settings.host, settings.port), backlog=2048)
    except OSError as exc:
        raise ConfigError(
            "NOTIFIER_API_PORT", f"cannot listen on {settings.host}:{settings.port}: {exc.strerror}"
        ) from exc


async def run_api(
    url: str, policy: Policy, settings: ApiSettings, database: DatabaseSettings | None = None
) -> None:
    """Serve the HTTP API until SIGTERM or SIGINT."""
    database = database or DatabaseSettings()
    await require_current_schema(url)
    sock = listen(settings)
    telemetry = Telemetry.configure("notifier-api", prometheus=True)
    pool = await create_pool(url, statement_cache_size=database.statement_cache_size)
    app = create_app(url, policy, max_body_bytes=settings.max_body_bytes, pool=pool)
    server = http_server(app, settings)
    log.info("API listening on http://%s:%d", settings.host, settings.port)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, [server.stop])
            await server.serve(sockets=[sock])
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await pool.close()
            await anyio.to_thread.run_sync(telemetry.shutdown)


async def stop_on_signals(stoppers: list[Callable[[], None]]) -> None:
    """First SIGTERM/SIGINT: stop gracefully. Second: exit at once (leases then expire)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
        stopping = False
        async for signum in received:
            if not stopping:
                stopping = True
                log.info("%s: shutting down gracefully", signal.Signals(signum).name)
                for stop in stoppers:
                    stop()
                continue
            log.warning("second signal: exiting at once; held leases will expire")
            logging.shutdown()
            sys.stderr.flush()
            os._exit(1)
