"""Screenshots of what people see: the email's HTML part at 600 and 390 px, and the dev pages
and the console at 1280 and 390 px, each in light and dark. They are written to
$NOTIFIER_SCREENSHOTS (or a temporary folder), which the test prints; docs/screenshots/ holds
the email's and the console's, made so:

    NOTIFIER_SCREENSHOTS=docs/screenshots pytest tests/acceptance/test_screenshots.py -k email
    NOTIFIER_SCREENSHOTS=docs/screenshots pytest tests/acceptance/test_screenshots.py -k console
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, get_args

import anyio
import httpx
import pytest
from playwright.async_api import Browser, Page

from notifier.delivery.messages import Templates
from notifier.outcomes import Method
from tests.support import harness
from tests.support.browser import (
    WAIT_SECONDS,
    Dev,
    inbox_holding,
    request_verification,
    sign_in_with_dev_key,
)
from tests.support.console_stack import ConsoleStack, console_paths, signed_in_page
from tests.support.looks import horizontal_overflow, low_contrast

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("chromium")]

Scheme = Literal["light", "dark"]
SCHEMES: tuple[Scheme, ...] = ("light", "dark")
ISSUED = datetime(2025, 6, 1, 11, 0, tzinfo=UTC)


@pytest.fixture
def shots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    folder = Path(harness.value(harness.SCREENSHOTS) or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    with capsys.disabled():
        print(f"\nscreenshots: {folder.resolve()}")
    return folder


def email_html(locale: str = "en", method: Method = "link") -> str:
    templates = Templates.load(None, product_name="Acme")
    message = templates.compose(
        message_id="<verify.example@acme.test>",
        sender="noreply@acme.test",
        recipient="ada@example.com",
        link="https://app.acme.test/verify?token=k1.Tq3n0r5vXw8yZ2aB4cD6eF8gH0iJ2kL4mN6oP8qR0sT",
        expires_at=ISSUED + timedelta(hours=1),
        purpose="signup",
        now=ISSUED + timedelta(seconds=2),
        issued_at=ISSUED,
        locale=locale,
        method=method,
        code="042917",
        code_expires_at=ISSUED + timedelta(minutes=10),
    )
    return message.html


async def shoot(browser: Browser, width: int, scheme: Scheme, height: int = 300) -> Page:
    """A page `width` px wide; full-page screenshots grow from `height` to fit the content."""
    context = await browser.new_context(
        viewport={"width": width, "height": height}, color_scheme=scheme, device_scale_factor=1
    )
    return await context.new_page()


@pytest.mark.parametrize("method", get_args(Method))
@pytest.mark.parametrize("locale", ["en", "de"])
async def test_email_html_part_screenshots_at_600_and_390_px(
    browser: Browser, shots: Path, locale: str, method: Method
) -> None:
    html = email_html(locale, method)
    suffix = {"link": "", "code": "-code", "link_and_code": "-link-code"}[method]
    suffix += "" if locale == "en" else f"-{locale}"
    for width in (600, 390):
        for scheme in SCHEMES:
            page = await shoot(browser, width, scheme)
            await page.set_content(html)
            path = shots / f"email-{width}-{scheme}{suffix}.png"
            await page.screenshot(path=path, full_page=True)
            assert path.stat().st_size > 10_000
            assert await horizontal_overflow(page) == 0, (width, scheme)
            await page.context.close()


@pytest.mark.parametrize("method", get_args(Method))
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width", [600, 390])
async def test_email_html_part_text_has_enough_contrast(
    browser: Browser, scheme: Scheme, width: int, method: Method
) -> None:
    page = await shoot(browser, width, scheme)
    await page.set_content(email_html(method=method))
    assert await low_contrast(page) == []
    await page.context.close()


async def test_email_button_spans_a_phone_screen_and_is_easy_to_tap(browser: Browser) -> None:
    page = await shoot(browser, 390, "light")
    await page.set_content(email_html())
    button = await page.get_by_role("link", name="Confirm my email address").bounding_box()
    card = await page.locator("td.card").bounding_box()
    assert button is not None and card is not None
    assert button["height"] >= 44  # a comfortable touch target
    assert button["width"] >= card["width"] - 2 * 24  # the card's padding, and no more
    await page.context.close()


async def test_dev_page_screenshots_at_1280_and_390_px(
    browser: Browser, api: httpx.AsyncClient, dev: Dev, dev_url: str, shots: Path
) -> None:
    await request_verification(api, "ada@example.com")
    await request_verification(api, "grace.hopper@example.org", locale="de")
    await request_verification(api, "linus@example.net")
    with anyio.fail_after(WAIT_SECONDS):
        newest, *_ = await inbox_holding(api, 3)
    number = newest["number"]
    pages = {
        "landing": "/",
        "inbox": "/dev/inbox",
        "message": f"/dev/inbox/{number}",
        "message-text": f"/dev/inbox/{number}?view=text",
        "message-headers": f"/dev/inbox/{number}?view=headers",
        "not-found": "/dev/inbox/999999",
    }
    for width in (1280, 390):
        for scheme in SCHEMES:
            page = await shoot(browser, width, scheme, height=800)
            await sign_in_with_dev_key(page.context, dev)
            for name, path in pages.items():
                await page.goto(dev_url + path)
                if name == "inbox":
                    await page.wait_for_selector("#messages[data-live=true]")
                file = shots / f"dev-{name}-{width}-{scheme}.png"
                await page.screenshot(path=file, full_page=True)
                assert file.stat().st_size > 5_000
            await page.context.close()


async def test_console_page_screenshots_at_1280_and_390_px(
    browser: Browser, stack: ConsoleStack, shots: Path
) -> None:
    for width in (1280, 390):
        for scheme in SCHEMES:
            signed_out = await shoot(browser, width, scheme, height=800)
            await signed_out.goto(stack.url + "/console")
            await signed_out.screenshot(path=shots / f"console-sign-in-{width}-{scheme}.png")
            await signed_out.context.close()
            page = await signed_in_page(browser, stack, width, scheme)
            for name, path in console_paths(stack).items():
                await page.goto(stack.url + path)
                file = shots / f"console-{name}-{width}-{scheme}.png"
                await page.screenshot(path=file, full_page=True)
                assert file.stat().st_size > 5_000
                assert await horizontal_overflow(page) == 0, (name, width, scheme)
            await page.context.close()
