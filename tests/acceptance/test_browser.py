"""The verification flow as a person sees it: `notifier dev` as a subprocess, a real Chromium
(tests/support/browser.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import asyncpg
import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from tests.support.browser import (
    BROWSER_WAIT_MS,
    WAIT_SECONDS,
    Dev,
    inbox_holding,
    request_verification,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("chromium")]


@pytest.fixture
def page(dev_page: Page) -> Page:
    """The inbox needs the dev key: the person's browser is signed in with it."""
    return dev_page


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


async def test_a_german_reader_verifies_in_german_from_email_to_result(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    created = await request_verification(api, "leser@example.de", locale="de")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    assert mail["subject"].startswith("Bestätigen Sie Ihre E-Mail-Adresse"), mail

    await page.goto(f"{dev_url}/dev/inbox/{mail['number']}")
    email = page.frame_locator("iframe.email-frame")
    await expect(email.locator("html")).to_have_attribute("lang", "de")
    await expect(email.get_by_text("(Registrierung)")).to_be_visible()
    await page.locator("#verify-link").click()
    await expect(page.locator("html")).to_have_attribute("lang", "de")
    await expect(page.locator("#what")).to_have_text(
        "Drücken Sie die Schaltfläche, um l***@example.de für notifier zu bestätigen."
    )
    await page.get_by_role("button", name="Bestätigen").click()
    outcome = page.locator("h1#outcome")
    await expect(outcome).to_have_attribute("data-outcome", "verified", timeout=BROWSER_WAIT_MS)
    await expect(outcome).to_have_text("Ihre E-Mail-Adresse ist bestätigt")
    await expect(page.locator("html")).to_have_attribute("lang", "de")
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
    dev: Dev, dev_url: str, browser: Browser
) -> None:
    context = await browser.new_context()
    page = await context.new_page()
    await page.goto(f"{dev_url}/sign-in?next=/docs")
    await page.get_by_label("API key").fill(dev.key)
    await page.get_by_role("button", name="Sign in").click()
    # The sign-in page's own form, posted by a real browser with the headers it really sends.
    await expect(page).to_have_url(f"{dev_url}/docs", timeout=BROWSER_WAIT_MS)
    await expect(page.locator(".swagger-ui .info .title")).to_contain_text(
        "notifier", timeout=BROWSER_WAIT_MS
    )
    await context.close()
