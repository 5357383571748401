"""The composition root: builds the pool, transport and worker from settings, runs them."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.middleware.trustedhost import TrustedHostMiddleware

from notifier import migrations
from notifier.api import create_internal_app
from notifier.config import (
    ApiSettings,
    DatabaseSettings,
    RequestSettings,
    RetentionSettings,
    SmtpSettings,
    TokenSettings,
    WorkerSettings,
)
from notifier.database import ONE_SHOT_CACHE, connect, create_pool
from notifier.errors import MigrationError
from notifier.httpserver import Listener, http_server, listen
from notifier.mailer import Transport, transport_from_settings
from notifier.maintenance import run_periodically
from notifier.messages import Templates
from notifier.public import create_public_app
from notifier.signals import Signals
from notifier.telemetry import QueueHealth, Telemetry, WorkerMetrics
from notifier.tokens import TokenKeys
from notifier.verifications import Policy
from notifier.web import Services
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
    # The limits' window, which says when budget counters can be forgotten.
    requests: RequestSettings = field(default_factory=RequestSettings)
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
            requests=RequestSettings.from_env(),
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
            tg.start_soon(run_periodically, pool, config.retention, config.requests.resend_window)
            await worker.run()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await transport.aclose()
            await pool.close()
            # Spans and metrics still buffered go out now (blocking, so off the loop).
            await anyio.to_thread.run_sync(telemetry.shutdown)


def bind_listeners(settings: ApiSettings) -> tuple[socket.socket, socket.socket]:
    """The internal API's socket and the public pages' socket, both bound, or neither."""
    internal = listen(settings.host, settings.port, "NOTIFIER_API_PORT")
    try:
        public = listen(settings.public_host, settings.public_port, "NOTIFIER_PUBLIC_PORT")
    except BaseException:
        internal.close()
        raise
    return internal, public


def http_listeners(
    services: Services,
    settings: ApiSettings,
    sockets: tuple[socket.socket, socket.socket],
    internal_routes: Callable[[Any], None] | None = None,
    hosts: Sequence[str] | None = None,
) -> list[Listener]:
    """Both listeners over one set of services: the internal API and the public pages.

    `hosts`: the only Host names they answer (others get 400), or None for any.
    """
    limit, timeout = settings.max_body_bytes, settings.body_timeout
    internal = create_internal_app(
        services,
        max_body_bytes=limit,
        body_timeout=timeout,
        trace_url=settings.trace_url_template,
        # Extra routes (dev's inbox) bring their own `/`.
        home=internal_routes is None,
    )
    if internal_routes is not None:
        internal_routes(internal)
    public = create_public_app(services, max_body_bytes=limit, body_timeout=timeout)
    if hosts is not None:
        for app in (internal, public):
            app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))
    return [
        Listener("internal API", http_server(internal, settings), sockets[0]),
        Listener("public pages", http_server(public, settings), sockets[1]),
    ]


async def keep_key_usage(services: Services) -> None:
    """Write when each API key was last used, every KEY_USAGE_FLUSH_SECONDS, in one batch."""
    while True:
        await anyio.sleep(KEY_USAGE_FLUSH_SECONDS)
        try:
            await services.keyring.flush_usage()
        except Exception as exc:
            log.warning("could not record API key usage (%s); will retry", exc)


# Seconds between writes of API keys' last-used times.
KEY_USAGE_FLUSH_SECONDS = 5.0


async def run_api(
    url: str, policy: Policy, settings: ApiSettings, database: DatabaseSettings | None = None
) -> None:
    """Serve the internal API and the public pages until SIGTERM or SIGINT."""
    database = database or DatabaseSettings()
    await require_current_schema(url)
    sockets = bind_listeners(settings)
    telemetry = Telemetry.configure("notifier-api", prometheus=True)
    pool = await create_pool(url, statement_cache_size=database.statement_cache_size)
    services = Services.over(pool, policy)
    listeners = http_listeners(services, settings, sockets)
    for listener in listeners:
        log.info("%s listening on %s", listener.name, listener.url)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, [lst.server.stop for lst in listeners])
            health = QueueHealth(pool)
            health.register_gauges()
            tg.start_soon(health.run)
            tg.start_soon(keep_key_usage, services)
            async with anyio.create_task_group() as servers:
                for listener in listeners:
                    servers.start_soon(listener.server.serve, [listener.sock])
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(Exception):
                await services.keyring.flush_usage()
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
