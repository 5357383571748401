"""A production-shaped console to look at: `notifier api` and `notifier worker` as real
subprocesses, a fault-injecting SMTP server, and an OTLP receiver so that deliveries carry
trace ids. Three deliveries end three ways (sent; failed after retries; refused for good,
which suppresses the mailbox), so every kind of console page has something to show.
Registered from tests/conftest.py (the `stack` fixture)."""

from __future__ import annotations

import contextlib
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal

import anyio
import asyncpg
import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from tests.conftest import TEST_SECRET
from tests.support.apps import bearer, make_key
from tests.support.browser import BROWSER_WAIT_MS
from tests.support.cli import running_cli
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.smtp_server import Fault, SmtpServer

# Seconds for both processes to start, and for every delivery to finish.
WAIT_SECONDS = 30
# Seconds between looks at the outbox, which other processes change.
POLL_SECONDS = 0.05
TRACE_URL = "http://localhost:16686/trace/{trace_id}"
SENT, RETRIED, REFUSED = "ada@example.com", "grace.hopper@example.org", "linus@example.net"


@dataclass(frozen=True)
class ConsoleStack:
    """The internal listener's address, keys to sign in with, and the three deliveries."""

    url: str
    admin_key: str
    metrics_key: str
    deliveries: dict[str, uuid.UUID]


@contextlib.asynccontextmanager
async def console_stack(
    database_url: str,
    db: asyncpg.Connection,
    smtp_server: SmtpServer,
    ports: Callable[[], int],
) -> AsyncIterator[ConsoleStack]:
    receiver = OtlpReceiver()
    receiver.start()
    smtp_server.plan(RETRIED, Fault.RCPT_4XX, Fault.RCPT_4XX)
    smtp_server.plan(REFUSED, Fault.RCPT_5XX)
    common = {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
        "NOTIFIER_MAX_ATTEMPTS": "2",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    }
    port = ports()
    worker_env = {
        **common,
        "NOTIFIER_SMTP_HOST": smtp_server.host,
        "NOTIFIER_SMTP_PORT": str(smtp_server.port),
        "NOTIFIER_SMTP_TLS": "none",
        "NOTIFIER_RETRY_BASE": "0.05",
        "NOTIFIER_RETRY_CEILING": "0.1",
    }
    api_env = {
        **common,
        "NOTIFIER_API_PORT": str(port),
        "NOTIFIER_PUBLIC_PORT": str(ports()),
        "NOTIFIER_TRACE_URL_TEMPLATE": TRACE_URL,
    }
    try:
        async with (
            running_cli("worker", env=worker_env) as worker,
            running_cli("api", env=api_env) as api,
        ):
            with anyio.fail_after(WAIT_SECONDS):
                await worker.wait_for_line("delivering (")
                await api.wait_for_line("internal API listening")
            url = f"http://127.0.0.1:{port}"
            deliveries = await _deliver(db, url)
            yield ConsoleStack(
                url,
                await make_key(db, ["read", "admin"], name="support desk"),
                await make_key(db, ["metrics"], name="prometheus"),
                deliveries,
            )
            for process in (worker, api):
                process.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(WAIT_SECONDS):
                await worker.process.wait()
                await api.process.wait()
    finally:
        receiver.stop()


async def _deliver(db: asyncpg.Connection, url: str) -> dict[str, uuid.UUID]:
    """Request one verification per address and wait until each delivery has finished."""
    key = await make_key(db, ["request"], name="signup app")
    deliveries = {}
    async with httpx.AsyncClient(base_url=url, headers=bearer(key)) as client:
        for address in (SENT, RETRIED, REFUSED):
            created = await client.post(
                "/v1/verifications",
                json={"user_id": f"user-{address}", "email": address},
                headers={"Idempotency-Key": f"signup-{address}"},
            )
            assert created.status_code == 202, created.text
            deliveries[address] = uuid.UUID(created.json()["id"])
    with anyio.fail_after(WAIT_SECONDS):
        # The worker is another process and announces nothing here: ask the outbox.
        while True:
            unfinished = "SELECT count(*) FROM notifier.email_outbox WHERE completed_at IS NULL"
            if await db.fetchval(unfinished) == 0:
                break
            await anyio.sleep(POLL_SECONDS)
    return deliveries


@pytest.fixture
async def stack(
    database_url: str,
    db: asyncpg.Connection,
    smtp_server: SmtpServer,
    free_tcp_port_factory: Callable[[], int],
) -> AsyncIterator[ConsoleStack]:
    async with console_stack(database_url, db, smtp_server, free_tcp_port_factory) as running:
        yield running


def console_paths(stack: ConsoleStack) -> dict[str, str]:
    """Every console page, each with something on it."""
    ids = stack.deliveries
    return {
        "queue": "/console",
        "search": f"/console/deliveries?q={SENT}",
        "delivery-sent": f"/console/deliveries/{ids[SENT]}",
        "delivery-failed": f"/console/deliveries/{ids[RETRIED]}",
        "delivery-refused": f"/console/deliveries/{ids[REFUSED]}",
        "suppressions": f"/console/suppressions?q={REFUSED}",
    }


async def sign_in(page: Page, key: str) -> None:
    """Sign in on the form a refused console page shows; the browser comes back to it."""
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()


async def signed_in_page(
    browser: Browser, stack: ConsoleStack, width: int, scheme: Literal["light", "dark"]
) -> Page:
    """A new browser `width` px wide in `scheme`, signed in to the console as support staff."""
    context = await browser.new_context(
        viewport={"width": width, "height": 800}, color_scheme=scheme, device_scale_factor=1
    )
    context.set_default_timeout(BROWSER_WAIT_MS)
    page = await context.new_page()
    await page.goto(f"{stack.url}/console")
    await sign_in(page, stack.admin_key)
    await expect(page.get_by_role("heading", level=1)).to_have_text("Queue health")
    return page
