"""Screenshots of what people see: the email's HTML part at 600 and 390 px, and the dev pages
and the console at 1280 and 390 px, each in light and dark. They are written to
$NOTIFIER_SCREENSHOTS (or a temporary folder), which the test prints; docs/screenshots/ holds
the email's, the console's, a selection of the dev pages' and the dev terminal's, made so:

    NOTIFIER_SCREENSHOTS=docs/screenshots pytest tests/acceptance/test_screenshots.py -k email
    NOTIFIER_SCREENSHOTS=docs/screenshots pytest tests/acceptance/test_screenshots.py -k console
    NOTIFIER_SCREENSHOTS=/tmp/shots pytest tests/acceptance/test_screenshots.py -k dev
"""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, get_args

import anyio
import httpx
import pytest
from playwright.async_api import Browser, Page
from rich.console import Console
from rich.terminal_theme import MONOKAI
from rich.text import Text

from notifier.delivery.messages import Templates
from notifier.outcomes import Method
from tests.support import harness
from tests.support.browser import (
    WAIT_SECONDS,
    Dev,
    inbox_holding,
    ready_dev,
    request_verification,
    sign_in_with_dev_key,
)
from tests.support.cli import running_cli
from tests.support.console_stack import ConsoleStack, console_paths, signed_in_page
from tests.support.dev_ready import wait_until_ready
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
    german = next(m for m in await inbox_holding(api, 3) if m["to"] == ["grace.hopper@example.org"])
    pages = {
        "landing": "/",
        "inbox": "/dev/inbox",
        "message": f"/dev/inbox/{number}",
        "message-text": f"/dev/inbox/{number}?view=text",
        "message-headers": f"/dev/inbox/{number}?view=headers",
        "message-check": f"/dev/inbox/{number}?view=check",
        "not-found": "/dev/inbox/999999",
        # The public pages a link opens (another origin: the path is the whole link).
        "confirm": newest["link"],
        "confirm-de": german["link"],
    }
    for width in (1280, 390):
        for scheme in SCHEMES:
            page = await shoot(browser, width, scheme, height=800)
            await sign_in_with_dev_key(page.context, dev)
            for name, path in pages.items():
                await page.goto(path if path.startswith("http") else dev_url + path)
                if name == "inbox":
                    await page.wait_for_selector("#messages[data-live=true]")
                if name.startswith("message"):
                    await page.wait_for_load_state("networkidle")
                assert await horizontal_overflow(page) == 0, (name, width, scheme)
                if name.startswith("confirm"):
                    assert await low_contrast(page) == [], (name, width, scheme)
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


async def test_dev_terminal_screenshot_after_the_readme_walk(
    browser: Browser, dev_env: dict[str, str], shots: Path
) -> None:
    """What `notifier dev` printed while a person walked the README: request, inbox, link,
    Confirm; drawn as a terminal shows it (rich's own rendering of the captured lines)."""
    # Colours as a terminal gets them (rich writes none to a pipe unless told).
    env = {**dev_env, "FORCE_COLOR": "1", "COLUMNS": "100"}
    async with running_cli("dev", env=env, capture_stdout=True) as cli:
        with anyio.fail_after(WAIT_SECONDS):
            ready = await wait_until_ready(cli)
        dev = ready_dev(ready)
        async with dev.client() as api:
            created = await request_verification(api, "ada@example.com")
            with anyio.fail_after(WAIT_SECONDS):
                [mail] = await inbox_holding(api, 1)
            person = await browser.new_page()
            await person.goto(mail["link"])
            await person.get_by_role("button", name="Confirm").click()
            await person.wait_for_selector("h1#outcome[data-outcome=verified]")
            await person.context.close()
            with anyio.fail_after(WAIT_SECONDS):
                await cli.wait_for_line("confirmed", stream="stdout")
    # Not a real key in the docs, and the data directory where the README's walk has it.
    printed = (
        "\n".join(cli.stdout_lines)
        .replace(dev.key, "nfk_…")
        .replace(dev_env["NOTIFIER_DATA_DIR"], ".notifier")
    )
    assert created["id"][:8] in printed
    terminal = Console(record=True, width=100, file=io.StringIO(), color_system="truecolor")
    terminal.print(Text.from_ansi(f"$ notifier dev\n{printed}"))
    page = await shoot(browser, 900, "dark", height=400)
    await page.set_content(terminal.export_html(inline_styles=True, theme=MONOKAI))
    file = shots / "dev-terminal-after-walk.png"
    await page.screenshot(path=file, full_page=True)
    assert file.stat().st_size > 5_000
    await page.context.close()
