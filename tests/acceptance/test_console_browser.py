"""The delivery console as operators and support staff use it, in a real Chromium: after
`notifier dev`'s inbox walk, and on a production-shaped stack (`notifier api` and `notifier
worker`, with deliveries that failed for real)."""

from __future__ import annotations

import re
from typing import Literal

import anyio
import asyncpg
import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from tests.support.apps import make_key
from tests.support.browser import (
    BROWSER_WAIT_MS,
    WAIT_SECONDS,
    Dev,
    inbox_holding,
    request_verification,
)
from tests.support.console_stack import (
    RETRIED,
    ConsoleStack,
    console_paths,
    sign_in,
    signed_in_page,
)
from tests.support.looks import horizontal_overflow, low_contrast

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("chromium")]


async def test_a_verification_from_the_emails_html_shows_in_the_console_as_sent(
    api: httpx.AsyncClient, dev: Dev, page: Page
) -> None:
    created = await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)

    # The inbox, not signed in yet: its sign-in form, which comes back to it. Then the
    # message's HTML view, and the link inside the email itself.
    await page.goto(f"{dev.url}/dev/inbox")
    await sign_in(page, dev.key)
    await expect(page).to_have_url(f"{dev.url}/dev/inbox")
    await page.get_by_role("link", name=mail["subject"]).click()
    email = page.frame_locator("iframe.email-frame")
    async with page.context.expect_page() as opened:
        await email.get_by_role("link", name="Confirm my email address").click()
    link_page = await opened.value
    await link_page.get_by_role("button", name="Confirm").click()
    outcome = link_page.locator("h1#outcome")
    await expect(outcome).to_have_attribute("data-outcome", "verified", timeout=BROWSER_WAIT_MS)

    # The console: the same session.
    await page.goto(f"{dev.url}/console/deliveries")
    await page.get_by_label("Email address or verification id").fill("Ada@Example.com")
    await page.get_by_role("button", name="Search").click()
    results = page.get_by_role("list", name="Deliveries, newest first")
    await expect(results.get_by_role("link")).to_have_count(1)
    await expect(results).to_contain_text("a***@example.com")
    await results.get_by_role("link").click()

    await expect(page).to_have_url(f"{dev.url}/console/deliveries/{created['id']}")
    await expect(page.locator("h1 + .status")).to_have_text("sent")
    attempts = page.get_by_role("list", name="Attempts, oldest first").locator("li")
    await expect(attempts).to_have_count(1)
    await expect(attempts.first.get_by_role("heading")).to_have_text("Attempt 1 sent")
    await expect(attempts.first).to_contain_text("250")
    await expect(page.locator("dt:text-is('Verified') + dd time")).to_be_visible()


async def test_the_console_refuses_a_key_without_the_read_scope(
    dev: Dev, db: asyncpg.Connection, page: Page
) -> None:
    scraper = await make_key(db, ["metrics"], name="prometheus")
    response = await page.goto(f"{dev.url}/console")
    assert response is not None and response.status == 401
    await sign_in(page, scraper)
    await expect(page.get_by_role("alert")).to_contain_text(
        "The key you signed in with (prometheus) lacks the “read” scope"
    )
    # Signing in again, with a key that has it, comes back to the console.
    await sign_in(page, dev.key)
    await expect(page.get_by_role("heading", level=1)).to_have_text("Queue health")


async def test_a_form_posted_without_its_csrf_token_changes_nothing(
    dev: Dev, db: asyncpg.Connection, page: Page
) -> None:
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason) VALUES ($1, '550 gone')",
        "gone@example.com",
    )
    await page.goto(f"{dev.url}/console/suppressions?q=gone@example.com")
    await sign_in(page, dev.key)
    clear = page.get_by_role("button", name="Clear the suppression")
    await page.locator("#main input[name=csrf]").evaluate("(field) => field.remove()")
    async with page.expect_response("**/console/suppressions/clear") as posted:
        await clear.click()
    assert (await posted.value).status == 403
    await expect(page.get_by_role("heading", level=1)).to_have_text("This form was refused")
    assert await db.fetchval("SELECT count(*) FROM notifier.suppressed_addresses") == 1

    # The page's own form, as served, does it.
    await page.goto(f"{dev.url}/console/suppressions?q=gone@example.com")
    await page.get_by_role("button", name="Clear the suppression").click()
    await expect(page.get_by_role("status")).to_contain_text("The suppression was cleared")
    assert await db.fetchval("SELECT count(*) FROM notifier.suppressed_addresses") == 0


async def test_the_console_can_be_used_with_the_keyboard_alone(
    api: httpx.AsyncClient, dev: Dev, page: Page
) -> None:
    created = await request_verification(api, "ada@example.com")
    await page.goto(f"{dev.url}/console/deliveries")

    async def tab_to(selector: str) -> None:
        for _ in range(20):
            await page.keyboard.press("Tab")
            if await page.evaluate(f"() => document.activeElement.matches({selector!r})"):
                return
        raise AssertionError(f"Tab never reached {selector}")

    await tab_to("#key")
    await page.keyboard.type(dev.key)
    await page.keyboard.press("Enter")
    # The sign-in form was served at this page's own address: wait for the page itself.
    await expect(page.get_by_role("heading", level=1)).to_have_text("Deliveries")
    await tab_to("#q")
    await page.keyboard.type("ada@example.com")
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(f"{dev.url}/console/deliveries?q=ada%40example.com")
    await tab_to("a.delivery")
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(f"{dev.url}/console/deliveries/{created['id']}")


# -- production-shaped: `notifier api` and `notifier worker` --------------------------------------


async def test_production_root_leads_signed_in_staff_to_the_console(
    browser: Browser, stack: ConsoleStack
) -> None:
    page = await signed_in_page(browser, stack, 1280, "light")
    await page.goto(f"{stack.url}/")
    await expect(page).to_have_url(f"{stack.url}/console")
    await page.context.close()


async def test_a_failed_delivery_is_resent_once_and_its_trace_links_to_the_viewer(
    browser: Browser, stack: ConsoleStack, db: asyncpg.Connection
) -> None:
    page = await signed_in_page(browser, stack, 1280, "light")
    await page.goto(f"{stack.url}/console/deliveries/{stack.deliveries[RETRIED]}")
    attempts = page.get_by_role("list", name="Attempts, oldest first").locator("li")
    await expect(attempts).to_have_count(2)
    await expect(attempts.first).to_contain_text("451")
    trace = page.locator("dt:text-is('Trace') + dd a")
    await expect(trace).to_have_attribute(
        "href", re.compile(r"^http://localhost:16686/trace/[0-9a-f]{32}$")
    )
    await page.get_by_role("button", name="Resend").click()
    await expect(page.get_by_role("status")).to_contain_text("A new link is on its way")
    await page.goto(f"{stack.url}/console/deliveries/{stack.deliveries[RETRIED]}")
    await expect(page.get_by_role("button", name="Resend")).to_have_count(0)
    count = "SELECT count(*) FROM notifier.verifications WHERE email = $1"
    assert await db.fetchval(count, RETRIED) == 2
    await page.context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_console_pages_have_enough_contrast_and_fit_a_phone(
    browser: Browser, stack: ConsoleStack, scheme: Literal["light", "dark"]
) -> None:
    for width in (1280, 390):
        context = await browser.new_context(
            viewport={"width": width, "height": 800}, color_scheme=scheme
        )
        signed_out = await context.new_page()
        await signed_out.goto(f"{stack.url}/console")
        assert await low_contrast(signed_out) == [], ("sign-in", width)
        assert await horizontal_overflow(signed_out) == 0, ("sign-in", width)
        await context.close()
        page = await signed_in_page(browser, stack, width, scheme)
        for name, path in console_paths(stack).items():
            await page.goto(stack.url + path)
            assert await low_contrast(page) == [], (name, width)
            assert await horizontal_overflow(page) == 0, (name, width)
        await page.context.close()
