"""Run real Worker instances inside a test, against a real database and SMTP server."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import anyio

from notifier import events
from notifier.config import SmtpSettings, WebhookSettings, WorkerSettings
from notifier.delivery.listener import Listener
from notifier.delivery.mailer import SmtpTransport, Transport
from notifier.delivery.messages import Templates
from notifier.delivery.webhooks.engine import CHANNEL as WEBHOOK_CHANNEL
from notifier.delivery.webhooks.engine import WebhookWorker
from notifier.delivery.worker import Worker
from notifier.storage.database import DEFAULT_STATEMENT_CACHE_SIZE, create_pool
from notifier.tokens import TokenKeys
from tests.support.recorder import Recorder, recorded

PUBLIC_URL = "http://verify.test"
MAIL_FROM = "noreply@notifier.test"

# Fast, deterministic defaults: no jitter, sub-second retries, a sweep slow enough that a
# test of notifications is not rescued by it.
TEST_WORKER_SETTINGS = WorkerSettings(
    sweep_interval=60.0,
    lease_seconds=10.0,
    concurrency=8,
    retry_base=0.05,
    retry_factor=2.0,
    retry_ceiling=0.2,
    retry_jitter=0.0,
    throttle_base=0.02,
    throttle_ceiling=0.2,
    shutdown_grace=5.0,
    listener_check_interval=0.5,
    listener_check_timeout=1.0,
)


def worker_settings(**overrides: Any) -> WorkerSettings:
    return dataclasses.replace(TEST_WORKER_SETTINGS, **overrides)


@contextlib.asynccontextmanager
async def running_worker(
    database_url: str,
    keys: TokenKeys,
    smtp: SmtpSettings | None = None,
    *,
    transport: Transport | None = None,
    name: str = "w1",
    recorder: Recorder | None = None,
    pool_url: str | None = None,
    statement_cache_size: int = DEFAULT_STATEMENT_CACHE_SIZE,
    **overrides: Any,
) -> AsyncIterator[Worker]:
    """A started worker (listening, in notify mode) that is stopped cleanly on exit.

    It LISTENs at `database_url`; its pool goes to `pool_url` (default: the same).
    """
    pool = await create_pool(pool_url or database_url, statement_cache_size=statement_cache_size)
    transport = transport or SmtpTransport(smtp or SmtpSettings())
    worker = Worker(
        pool=pool,
        database_url=database_url,
        settings=worker_settings(**overrides),
        transport=transport,
        templates=Templates.load(None),
        keys=keys,
        mail_from=MAIL_FROM,
        public_url=PUBLIC_URL,
        owner=f"test:{name}",
        observer=recorder or Recorder(),
    )
    try:
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(10):
                await tg.start(worker.run)
                # The start-up sweep has run, so what a test enqueues next is found by the
                # path the test means (a notification, the poll), not by that first sweep.
                await recorded(worker).wait_for(
                    lambda s: any(e.owner == worker.owner for e in s.of(events.Swept))
                )
            try:
                yield worker
            finally:
                worker.stop()
    finally:
        await transport.aclose()
        await pool.close()


# Loopback receivers, short timeouts and retries, and a sweep too slow to rescue a test of
# notifications.
TEST_WEBHOOK_SETTINGS = WebhookSettings(
    allow_private=True,
    timeout=2.0,
    retry_schedule=(0.05, 0.05, 0.05, 0.05),
    sweep_interval=60.0,
)


@contextlib.asynccontextmanager
async def running_webhooks(
    database_url: str,
    keys: TokenKeys,
    *,
    recorder: Recorder | None = None,
    name: str = "h1",
    **overrides: Any,
) -> AsyncIterator[WebhookWorker]:
    """A started webhook sender, woken by its own LISTEN connection as a worker process's
    is by the email worker's; stopped on exit (its requests in flight end first)."""
    pool = await create_pool(database_url)
    observer = recorder or Recorder()
    hooks = WebhookWorker(
        pool=pool,
        settings=dataclasses.replace(TEST_WEBHOOK_SETTINGS, **overrides),
        keys=keys,
        owner=f"test:{name}",
        observer=observer,
    )
    listener = Listener(
        database_url,
        pool,
        on_ids=lambda ids: None,
        on_connected=lambda: None,
        observer=observer,
        check_interval=TEST_WORKER_SETTINGS.listener_check_interval,
        check_timeout=TEST_WORKER_SETTINGS.listener_check_timeout,
    )
    listener.also_listen(WEBHOOK_CHANNEL, hooks.wake)
    try:
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(10):
                await tg.start(hooks.run)
            async with anyio.create_task_group() as listening:
                with anyio.fail_after(10):
                    await listening.start(listener.run)
                try:
                    yield hooks
                finally:
                    # The sender ends its requests in flight by itself; the listener goes.
                    hooks.stop()
                    listening.cancel_scope.cancel()
    finally:
        await pool.close()
