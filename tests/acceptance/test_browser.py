"""The verification flow as a person sees it: `notifier dev` as a subprocess, a real Chromium.

The browser is the machine's own Chromium (Debian's `chromium` package), driven by
Playwright; Playwright's browser download is not used. Without it the tests skip locally and
fail in CI, where a missing browser must not pass as a green run.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.support.apps import bearer
from tests.support.cli import running_cli

pytestmark = pytest.mark.anyio

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
READY = "notifier dev: API "


@pytest.fixture(autouse=True)
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
async def dev_ready_line(
    database_url: str, free_tcp_port_factory: Callable[[], int], tmp_path: Path
) -> AsyncIterator[str]:
    """What `notifier dev` on this test's database prints once it is ready."""
    env = {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_API_PORT": str(free_tcp_port_factory()),
        "NOTIFIER_PUBLIC_PORT": str(free_tcp_port_factory()),
        "NOTIFIER_DATA_DIR": str(tmp_path / "dev-data"),
    }
    async with running_cli("dev", env=env, capture_stdout=True) as cli:
        with anyio.fail_after(WAIT_SECONDS):
            yield await cli.wait_for_line(READY, stream="stdout")


@pytest.fixture
def dev_url(dev_ready_line: str) -> str:
    """The internal API's address (the inbox is there too)."""
    announced = re.search(r"API (\S+) \(key (nfk_\S+)\)", dev_ready_line)
    assert announced, dev_ready_line
    return announced.group(1)


@pytest.fixture
async def api(dev_url: str, dev_ready_line: str) -> AsyncIterator[httpx.AsyncClient]:
    """The internal API with the dev key that `notifier dev` printed."""
    key = re.search(r"\(key (nfk_\S+)\)", dev_ready_line)
    assert key, dev_ready_line
    async with httpx.AsyncClient(base_url=dev_url, headers=bearer(key.group(1))) as client:
        yield client


async def request_verification(api: httpx.AsyncClient, email: str) -> dict[str, Any]:
    response = await api.post(
        "/v1/verifications",
        json={"user_id": f"user-{email}", "email": email, "purpose": "signup"},
        headers={"Idempotency-Key": f"browser-{uuid.uuid4()}"},
    )
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


async def inbox_holding(api: httpx.AsyncClient, count: int) -> list[dict[str, Any]]:
    """The dev inbox's messages, newest first, once there are `count`; callers bound the wait.

    The inbox is in the `notifier dev` process and announces nothing, so this asks its JSON
    view until the worker has delivered.
    """
    while True:
        response = await api.get("/dev/inbox.json")
        assert response.status_code == 200, response.text
        messages: list[dict[str, Any]] = response.json()
        if len(messages) >= count:
            return messages
        await anyio.sleep(INBOX_POLL_SECONDS)


async def verified(api: httpx.AsyncClient, verification_id: str) -> bool:
    response = await api.get(f"/v1/verifications/{verification_id}")
    assert response.status_code == 200, response.text
    return bool(response.json()["verified"])


async def test_a_person_verifies_their_address_from_the_dev_inbox(
    api: httpx.AsyncClient, dev_url: str, page: Page, tmp_path: Path
) -> None:
    created = await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    assert mail["to"] == ["ada@example.com"] and mail["link"], mail

    await page.goto(f"{dev_url}/dev/inbox")
    await page.get_by_role("link", name=mail["subject"]).click()
    await page.locator("#verify-link").click()
    confirm = page.get_by_role("button", name="Confirm")
    await expect(confirm).to_be_visible(timeout=BROWSER_WAIT_MS)
    # Opening the link changes nothing (mail scanners open links too): only the button does.
    assert not await verified(api, created["id"])

    await confirm.click()
    outcome = page.locator("h1#outcome")
    await expect(outcome).to_have_attribute("data-outcome", "verified", timeout=BROWSER_WAIT_MS)
    await page.screenshot(path=tmp_path / "verified.png", full_page=True)
    assert await verified(api, created["id"])


async def test_an_expired_link_offers_a_new_one_which_arrives_in_the_inbox(
    api: httpx.AsyncClient, dev_url: str, page: Page, db: asyncpg.Connection, tmp_path: Path
) -> None:
    created = await request_verification(api, "grace@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [first] = await inbox_holding(api, 1)
    # Expired by the database clock, which is what the link check reads: no waiting an hour.
    expired = await db.execute(
        "UPDATE notifier.verifications SET expires_at = now() - interval '1 second' WHERE id = $1",
        uuid.UUID(created["id"]),
    )
    assert expired == "UPDATE 1"

    await page.goto(first["link"])
    outcome = page.locator("h1#outcome")
    await expect(outcome).to_have_attribute("data-outcome", "expired", timeout=BROWSER_WAIT_MS)
    await page.screenshot(path=tmp_path / "expired.png", full_page=True)
    await page.get_by_role("button", name="Send me a new link").click()
    await expect(outcome).to_have_attribute("data-outcome", "resent", timeout=BROWSER_WAIT_MS)
    await expect(outcome).to_have_text("A new link is on its way", timeout=BROWSER_WAIT_MS)

    with anyio.fail_after(WAIT_SECONDS):
        newest, older = await inbox_holding(api, 2)
    assert older["link"] == first["link"]
    assert newest["to"] == ["grace@example.com"] and newest["link"] != first["link"]
    await page.goto(f"{dev_url}/dev/inbox")
    await expect(page.locator('a[href^="/dev/inbox/"]')).to_have_count(2, timeout=BROWSER_WAIT_MS)
    # The new link is live: it leads to the Confirm button, not to another expired page.
    await page.goto(newest["link"])
    await expect(page.get_by_role("button", name="Confirm")).to_be_visible(timeout=BROWSER_WAIT_MS)


async def test_a_person_signs_in_with_a_key_and_reads_the_docs(
    dev_url: str, dev_ready_line: str, page: Page
) -> None:
    key = re.search(r"\(key (nfk_\S+)\)", dev_ready_line)
    assert key, dev_ready_line
    await page.goto(f"{dev_url}/sign-in?next=/docs")
    await page.get_by_label("API key").fill(key.group(1))
    await page.get_by_role("button", name="Sign in").click()
    # The sign-in page's own form, posted by a real browser with the headers it really sends.
    await expect(page).to_have_url(f"{dev_url}/docs", timeout=BROWSER_WAIT_MS)
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text(
        "notifier", timeout=BROWSER_WAIT_MS
    )
