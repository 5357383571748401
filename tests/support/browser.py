"""A real Chromium and a running `notifier dev`, for the tests that look at pages.

The browser is the machine's own Chromium (Debian's `chromium` package), driven by
Playwright; Playwright's browser download is not used. Without it the tests skip locally and
fail in CI, where a missing browser must not pass as a green run. Registered from
tests/conftest.py; modules that use a browser start with `pytest.mark.usefixtures("chromium")`
so the check runs before anything is started.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from notifier.web.access import SESSION_COOKIE
from tests.support.apps import bearer
from tests.support.cli import running_cli
from tests.support.dev_ready import Ready, wait_until_ready

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # The machine has no internet: Chromium's own background traffic would only stall.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Seconds for `notifier dev` to start, and for the worker to deliver a message to the inbox.
WAIT_SECONDS = 30
# Milliseconds for any one browser step (navigation, click, expectation).
BROWSER_WAIT_MS = 15_000
# Seconds between looks at the inbox, which lives in another process and cannot be awaited.
INBOX_POLL_SECONDS = 0.05


@pytest.fixture
def chromium() -> Path:
    """The system Chromium, checked before anything is started for the test."""
    if CHROMIUM.exists():
        return CHROMIUM
    why = f"{CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium)"
    if os.environ.get("CI", "").lower() in {"true", "1"}:
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


@pytest.fixture
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context()
    context.set_default_timeout(BROWSER_WAIT_MS)
    try:
        yield await context.new_page()
    finally:
        await context.close()


@pytest.fixture
def dev_data(tmp_path: Path) -> Path:
    """The data directory of this test's `notifier dev` (the inbox lives in it)."""
    return tmp_path / "dev-data"


@pytest.fixture
def dev_env(
    database_url: str, free_tcp_port_factory: Callable[[], int], dev_data: Path
) -> dict[str, str]:
    return {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_API_PORT": str(free_tcp_port_factory()),
        "NOTIFIER_PUBLIC_PORT": str(free_tcp_port_factory()),
        "NOTIFIER_DATA_DIR": str(dev_data),
    }


@dataclass(frozen=True)
class Dev:
    """A ready `notifier dev`: its internal address (API, inbox, landing page) and its key."""

    url: str
    key: str

    def client(self) -> httpx.AsyncClient:
        """The internal API, with the dev key that `notifier dev` printed."""
        return httpx.AsyncClient(base_url=self.url, headers=bearer(self.key))


def ready_dev(ready: Ready) -> Dev:
    return Dev(ready.url, ready.key)


@contextlib.asynccontextmanager
async def dev_server(env: Mapping[str, str]) -> AsyncIterator[Dev]:
    """`notifier dev` as a subprocess, once it says it is ready."""
    async with running_cli("dev", env=env, capture_stdout=True) as cli:
        with anyio.fail_after(WAIT_SECONDS):
            ready = await wait_until_ready(cli)
        yield ready_dev(ready)


@pytest.fixture
async def dev(dev_env: dict[str, str]) -> AsyncIterator[Dev]:
    """`notifier dev` on this test's database, once it says it is ready."""
    async with dev_server(dev_env) as ready:
        yield ready


@pytest.fixture
def dev_url(dev: Dev) -> str:
    """The internal listener's address: the API, the inbox and the landing page."""
    return dev.url


@pytest.fixture
async def api(dev: Dev) -> AsyncIterator[httpx.AsyncClient]:
    async with dev.client() as client:
        yield client


async def sign_in_with_dev_key(context: BrowserContext, dev: Dev) -> None:
    """Sign a browser context in with the dev key, as its sign-in form does (the inbox needs
    it): the session cookie the answer sets is the context's from then on."""
    response = await context.request.post(
        f"{dev.url}/sign-in", form={"key": dev.key, "next": "/dev/inbox"}
    )
    assert response.ok, await response.text()
    assert any(c["name"] == SESSION_COOKIE for c in await context.cookies()), "not signed in"


@pytest.fixture
async def dev_page(browser: Browser, dev: Dev) -> AsyncIterator[Page]:
    """A page whose browser is signed in with the dev key, as a developer's is."""
    context = await browser.new_context()
    context.set_default_timeout(BROWSER_WAIT_MS)
    await sign_in_with_dev_key(context, dev)
    try:
        yield await context.new_page()
    finally:
        await context.close()


async def request_verification(api: httpx.AsyncClient, email: str, **fields: str) -> dict[str, Any]:
    response = await api.post(
        "/v1/verifications",
        json={"user_id": f"user-{email}", "email": email, "purpose": "signup", **fields},
        headers={"Idempotency-Key": f"browser-{uuid.uuid4()}"},
    )
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


async def inbox_holding(api: httpx.AsyncClient, count: int) -> list[dict[str, Any]]:
    """The dev inbox's messages, newest first, once there are `count`; callers bound the wait.

    The inbox is in the `notifier dev` process and announces nothing here, so this asks its
    JSON view until the worker has delivered.
    """
    while True:
        response = await api.get("/dev/inbox.json")
        assert response.status_code == 200, response.text
        messages: list[dict[str, Any]] = response.json()
        if len(messages) >= count:
            return messages
        await anyio.sleep(INBOX_POLL_SECONDS)
