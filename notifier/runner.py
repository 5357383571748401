"""The composition root: builds the pool, transport and worker from settings, runs them."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi import FastAPI
from starlette.middleware.trustedhost import TrustedHostMiddleware

from notifier.config import (
    ApiSettings,
    CodeSettings,
    DatabaseSettings,
    InboundSettings,
    RequestSettings,
    RetentionSettings,
    SmtpSettings,
    TokenSettings,
    WebhookSettings,
    WorkerSettings,
)
from notifier.delivery.mailer import Transport, transport_from_settings
from notifier.delivery.messages import Templates
from notifier.delivery.webhooks.engine import CHANNEL as WEBHOOK_CHANNEL
from notifier.delivery.webhooks.engine import WebhookWorker
from notifier.delivery.worker import Worker, default_owner
from notifier.errors import ConfigError, MigrationError
from notifier.events import Events, Observer
from notifier.metrics import QueueHealth, WorkerMetrics
from notifier.storage import migrations
from notifier.storage.connection import Pool
from notifier.storage.database import ONE_SHOT_CACHE, connect, create_pool
from notifier.storage.event_feed import run_lapse_sweeps
from notifier.storage.maintenance import run_periodically
from notifier.storage.stats import queue_figures
from notifier.telemetry import Telemetry
from notifier.tokens import TokenKeys
from notifier.verifications import Policy
from notifier.web.api import create_internal_app
from notifier.web.console import routes as console
from notifier.web.listeners import BODY_TIMEOUT_SECONDS, MAX_BODY_BYTES, Services
from notifier.web.public import create_public_app
from notifier.web.server import Listener, http_server, listen

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
    # The codes' failure window, which cleanup forgets their counts by.
    codes: CodeSettings = field(default_factory=CodeSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)

    @classmethod
    def from_env(cls) -> WorkerConfig:
        return cls(
            database=DatabaseSettings.from_env(),
            webhooks=WebhookSettings.from_env(),
            worker=WorkerSettings.from_env(),
            smtp=SmtpSettings.from_env(),
            tokens=TokenSettings.from_env(),
            templates=Templates.from_env(),
            retention=RetentionSettings.from_env(),
            requests=RequestSettings.from_env(),
            codes=CodeSettings.from_env(),
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
    pool: Pool,
    config: WorkerConfig,
    transport: Transport,
    observer: Observer | None = None,
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
        observer=observer,
        bounce_domain=config.smtp.bounce_domain,
    )


async def run_worker(url: str, config: WorkerConfig, observer: Observer | None = None) -> None:
    """Run one worker until SIGTERM or SIGINT; a second signal exits at once."""
    await require_current_schema(url)
    await serve(
        url,
        "notifier-worker",
        config.database.statement_cache_size,
        worker=WorkerPlan(config, config.database.listen_url_for(url), observer=observer),
    )


def bind_listeners(settings: ApiSettings) -> tuple[socket.socket, socket.socket]:
    """The internal API's socket and the public pages' socket, both bound, or neither."""
    internal = listen(settings.host, settings.port, "NOTIFIER_API_PORT")
    try:
        public = listen(settings.public_host, settings.public_port, "NOTIFIER_PUBLIC_PORT")
    except BaseException:
        internal.close()
        raise
    return internal, public


def internal_app(
    services: Services,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_timeout: float = BODY_TIMEOUT_SECONDS,
    trace_url: str | None = None,
    with_home: bool = True,
) -> FastAPI:
    """The internal listener's app: the internal API, and the console mounted on it.

    `trace_url`: where the console links trace ids (NOTIFIER_TRACE_URL_TEMPLATE);
    `with_home`: `/` leads to the console (False: another serves `/`, as `notifier dev`
    does).
    """
    app = create_internal_app(services, max_body_bytes=max_body_bytes, body_timeout=body_timeout)
    console.mount(app, trace_url=trace_url, with_home=with_home)
    return app


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
    internal = internal_app(
        services,
        max_body_bytes=limit,
        body_timeout=timeout,
        trace_url=settings.trace_url_template,
        # Extra routes (dev's inbox) bring their own `/`.
        with_home=internal_routes is None,
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
    url: str,
    policy: Policy,
    settings: ApiSettings,
    database: DatabaseSettings | None = None,
    webhooks: WebhookSettings | None = None,
) -> None:
    """Serve the internal API and the public pages until SIGTERM or SIGINT."""
    database = database or DatabaseSettings()
    await require_current_schema(url)
    http = HttpPlan(policy, settings, bind_listeners(settings), webhooks=webhooks)
    await serve(url, "notifier-api", database.statement_cache_size, http=http)


@dataclass(frozen=True, slots=True)
class HttpPlan:
    """The two HTTP listeners a process serves: over which policy, on which sockets."""

    policy: Policy
    settings: ApiSettings
    sockets: tuple[socket.socket, socket.socket]
    internal_routes: Callable[[Any], None] | None = None
    hosts: Sequence[str] | None = None
    webhooks: WebhookSettings | None = None


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """The worker a process runs: its configuration, where it LISTENs, what it sends with."""

    config: WorkerConfig
    listen_url: str
    transport: Transport | None = None
    observer: Observer | None = None


async def serve(
    url: str,
    service_name: str,
    statement_cache_size: int,
    *,
    http: HttpPlan | None = None,
    worker: WorkerPlan | None = None,
    also_stop: Sequence[Callable[[], None]] = (),
    also_run: Sequence[Callable[..., Coroutine[Any, Any, None]]] = (),
    on_ready: Callable[[list[Listener]], None] | None = None,
) -> None:
    """Everything one process runs, on one pool, until SIGTERM or SIGINT: the HTTP listeners,
    a worker, or both (`notifier dev`); with the background tasks each needs (queue gauges,
    API key usage, retention). `also_run`: the caller's own tasks (dev's activity lines),
    each started (anyio's `task_status`) before anything is served, cancelled at the end.
    A second signal exits at once."""
    telemetry = Telemetry.configure(service_name, prometheus=http is not None)
    pool = await create_pool(url, statement_cache_size=statement_cache_size)
    services = None
    if http is not None:
        # The pages speak as the email does: its words, its product.
        templates = worker.config.templates if worker is not None else Templates.from_env()
        services = Services.over(
            pool,
            http.policy,
            http.webhooks,
            inbound=InboundSettings.from_env(),
            bounce_domain=SmtpSettings.from_env().bounce_domain,
            suppression_seconds=WorkerSettings.from_env().suppression_ttl,
            strings=templates.strings,
            product_name=templates.product_name,
        )
    listeners = [] if http is None or services is None else _listeners(services, http)
    transport = None if worker is None else worker.transport or _transport(worker.config)
    running = None if worker is None or transport is None else _worker(pool, worker, transport)
    hooks = None if running is None or worker is None else _webhooks(pool, worker, running)
    try:
        async with anyio.create_task_group() as tg:
            stoppers = [lst.server.stop for lst in listeners] + [*also_stop]
            workers = [] if running is None or hooks is None else [running.stop, hooks.stop]
            tg.start_soon(stop_on_signals, workers + stoppers)
            if http is not None or telemetry.meter_provider is not None:
                health = QueueHealth(functools.partial(queue_figures, pool))
                health.register_gauges()
                tg.start_soon(health.run)
            if services is not None:
                tg.start_soon(keep_key_usage, services)
            if running is not None and worker is not None:
                config = worker.config
                windows = (config.requests.resend_window, config.codes.failure_window)
                tg.start_soon(run_periodically, pool, config.retention, *windows)
                settings = worker.config.worker
                tg.start_soon(run_lapse_sweeps, pool, settings.sweep_interval, settings.batch_size)
            for task in also_run:
                await tg.start(task)
            async with anyio.create_task_group() as processes:
                if running is not None and hooks is not None:
                    await processes.start(running.run)
                    await processes.start(hooks.run)
                # The sockets are already listening: requests wait in their backlog.
                for listener in listeners:
                    processes.start_soon(listener.server.serve, [listener.sock])
                for listener in listeners:
                    log.info("%s listening on %s", listener.name, listener.url)
                if on_ready is not None:
                    on_ready(listeners)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if services is not None:
                with contextlib.suppress(Exception):
                    await services.keyring.flush_usage()
            if transport is not None:
                await transport.aclose()
            await pool.close()
            # Spans and metrics still buffered go out now (blocking, so off the loop).
            await anyio.to_thread.run_sync(telemetry.shutdown)


def _listeners(services: Services, http: HttpPlan) -> list[Listener]:
    return http_listeners(services, http.settings, http.sockets, http.internal_routes, http.hosts)


def _transport(config: WorkerConfig) -> Transport:
    # Looked up at call time, so a benchmark can wrap the transport it builds.
    return transport_from_settings(config.worker.transport, config.smtp)


def _worker(pool: Pool, plan: WorkerPlan, transport: Transport) -> Worker:
    observer = Events(WorkerMetrics(), *([plan.observer] if plan.observer is not None else []))
    return build_worker(plan.listen_url, pool, plan.config, transport, observer)


def _webhooks(pool: Pool, plan: WorkerPlan, worker: Worker) -> WebhookWorker:
    """The process's webhook sender, woken on the email worker's LISTEN connection."""
    hooks = WebhookWorker(
        pool=pool,
        settings=plan.config.webhooks,
        keys=worker.keys,
        owner=default_owner("webhooks"),
        observer=worker.observer,
    )
    worker.listener.also_listen(WEBHOOK_CHANNEL, hooks.wake)
    return hooks


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


async def run_inbound(url: str, smtp: SmtpSettings, inbound: InboundSettings) -> None:
    """`notifier inbound`: take reports mailed to NOTIFIER_BOUNCE_DOMAIN's return paths and
    apply them, until SIGTERM or SIGINT."""
    from notifier.inbound.server import InboundListener

    if smtp.bounce_domain is None:
        raise ConfigError(
            "NOTIFIER_BOUNCE_DOMAIN", "is required: the domain whose mail `notifier inbound` takes"
        )
    keys = TokenKeys(TokenSettings.from_env().secrets)
    suppression = WorkerSettings.from_env().suppression_ttl
    pool = await create_pool(url)
    listener = InboundListener.over(pool, keys, smtp.bounce_domain, suppression, inbound)
    try:
        port = await listener.start(inbound.host, inbound.port)
        log.info(
            "notifier inbound: taking reports for %s on %s:%d",
            smtp.bounce_domain,
            inbound.host,
            port,
        )
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, [done.set])
            await done.wait()
            tg.cancel_scope.cancel()
    finally:
        await listener.stop()
        await pool.close()
