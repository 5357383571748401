"""The dev inbox and landing page as a developer uses them: `notifier dev` as a subprocess, a
real Chromium (tests/support/browser.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Literal

import anyio
import httpx
import pytest
from playwright.async_api import Browser, Dialog, Page, Request, ViewportSize, expect

from notifier.dev.web import FRAME_SCRIPT_HASH
from notifier.dev.web import routes as dev_routes
from notifier.web.access import ScopedRoute
from tests.support.browser import (
    BROWSER_WAIT_MS,
    WAIT_SECONDS,
    Dev,
    dev_server,
    inbox_holding,
    ready_dev,
    request_verification,
    sign_in_with_dev_key,
)
from tests.support.cli import running_cli
from tests.support.dev_ready import wait_until_ready
from tests.support.looks import horizontal_overflow, low_contrast

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("chromium")]

PHONE: ViewportSize = {"width": 390, "height": 844}


@pytest.fixture
def page(dev_page: Page) -> Page:
    """The inbox needs the dev key: every page here is a browser signed in with it."""
    return dev_page


async def live_inbox(page: Page, dev_url: str, path: str = "/dev/inbox") -> None:
    """Open the inbox list and wait until its event stream is connected."""
    await page.goto(dev_url + path)
    await expect(page.locator("#messages")).to_have_attribute("data-live", "true")


async def test_root_is_a_landing_page_linking_the_inbox_the_console_the_docs_and_the_walk(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    response = await api.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    await page.goto(dev_url + "/")
    await expect(page.get_by_role("heading", level=1)).to_have_text("notifier dev is running")
    cards = page.get_by_role("list", name="Where to go")
    for name, href in (
        ("Inbox", "/dev/inbox"),
        ("Console", "/console"),
        ("API docs", "/docs"),
        ("Walk", "#walk"),
    ):
        await expect(cards.get_by_role("link", name=name)).to_have_attribute("href", href)
    await cards.get_by_role("link", name="Inbox").click()
    await expect(page).to_have_url(dev_url + "/dev/inbox")


async def test_new_mail_appears_in_an_open_inbox_by_itself_with_one_fetch_per_change(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    fetches: list[str] = []

    def count(request: Request) -> None:
        if "/dev/inbox.json" in request.url:
            fetches.append(request.url)

    page.on("request", count)
    await live_inbox(page, dev_url)
    await expect(page.locator("#empty")).to_be_visible()
    await request_verification(api, "ada@example.com")
    await expect(page.locator("#messages li")).to_have_count(1, timeout=WAIT_SECONDS * 1000)
    await expect(page.locator("#messages li")).to_contain_text("ada@example.com")
    await expect(page.locator("#live")).to_have_text("1 message arrived.")
    await request_verification(api, "grace@example.com")
    await expect(page.locator("#messages li")).to_have_count(2, timeout=WAIT_SECONDS * 1000)
    # No polling: the list was fetched once per change it was told of, never on a timer.
    assert len(fetches) == 2, fetches


async def test_a_message_shows_its_html_in_a_sandboxed_frame_and_switches_views(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    await page.goto(f"{dev_url}/dev/inbox/{mail['number']}")

    frame_element = page.locator("iframe.email-frame")
    await expect(frame_element).to_have_attribute(
        "sandbox", "allow-scripts allow-popups allow-popups-to-escape-sandbox"
    )
    frame = page.frame_locator("iframe.email-frame")
    await expect(frame.get_by_role("link", name="Confirm my email address")).to_be_visible()
    # An opaque origin: whatever the email holds cannot reach this page or the API.
    assert await frame.locator("html").evaluate("() => window.origin") == "null"

    views = page.get_by_role("navigation", name="Show the message as")
    await views.get_by_role("link", name="Text").click()
    await expect(page.locator("pre.source")).to_contain_text(mail["link"])
    await views.get_by_role("link", name="Headers").click()
    await expect(page.locator("table.headers")).to_contain_text("auto-generated")
    await views.get_by_role("link", name="Raw source").click()
    await expect(page.locator("pre.source")).to_contain_text("Content-Type: multipart/alternative")
    await expect(page.locator("#verify-link")).to_have_attribute("href", mail["link"])


async def test_the_email_view_cannot_run_script_even_when_opened_directly(
    api: httpx.AsyncClient,
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    response = await api.get(f"/dev/inbox/{mail['number']}/html")
    policy = response.headers["content-security-policy"]
    assert policy.startswith("sandbox allow-scripts allow-popups allow-popups-to-escape-sandbox;")
    assert "default-src 'none'" in policy and "frame-ancestors 'self'" in policy
    # The email's own <base href> would send its relative links to another site.
    assert "base-uri 'none'" in policy
    # The one script allowed is the frame's own, by its hash; never this origin with it.
    assert f"script-src 'sha256-{FRAME_SCRIPT_HASH}';" in policy
    assert "allow-same-origin" not in policy and "unsafe-inline' ;" not in policy


async def test_inbox_pages_send_a_strict_content_security_policy(
    api: httpx.AsyncClient,
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    for path in ("/", "/dev/inbox", f"/dev/inbox/{mail['number']}", "/dev/inbox/999"):
        response = await api.get(path)
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy, path
        assert "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy, path
        assert response.headers["referrer-policy"] == "no-referrer", path


async def test_the_inbox_works_with_no_network_and_loads_nothing_from_elsewhere(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    elsewhere: list[str] = []
    page.on(
        "request",
        lambda request: None if request.url.startswith(dev_url) else elsewhere.append(request.url),
    )
    await live_inbox(page, dev_url)
    await page.goto(f"{dev_url}/dev/inbox/{mail['number']}")
    await expect(page.frame_locator("iframe.email-frame").locator("h1")).to_be_visible()
    await page.goto(dev_url + "/")
    assert elsewhere == []


async def test_searching_by_address_filters_the_list_as_you_type(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    for address in ("ada@example.com", "grace@example.org", "linus@example.net"):
        await request_verification(api, address)
    with anyio.fail_after(WAIT_SECONDS):
        await inbox_holding(api, 3)
    await live_inbox(page, dev_url)
    await page.get_by_label("Search subject, addresses and text").fill("EXAMPLE.ORG")
    await expect(page.locator("#messages li")).to_have_count(1)
    await expect(page.locator("#messages li")).to_contain_text("grace@example.org")
    await expect(page.locator("#count")).to_have_text("3 messages · 1 shown")
    await expect(page).to_have_url(dev_url + "/dev/inbox?q=EXAMPLE.ORG")
    await page.get_by_label("Search subject, addresses and text").fill("nobody")
    await expect(page.locator("#empty")).to_contain_text("nobody")


async def test_search_works_without_javascript_too(
    api: httpx.AsyncClient, browser: Browser, dev: Dev, dev_url: str
) -> None:
    await request_verification(api, "ada@example.com")
    await request_verification(api, "grace@example.org")
    with anyio.fail_after(WAIT_SECONDS):
        await inbox_holding(api, 2)
    context = await browser.new_context(java_script_enabled=False)
    await sign_in_with_dev_key(context, dev)
    page = await context.new_page()
    await page.goto(dev_url + "/dev/inbox")
    await page.get_by_label("Search subject, addresses and text").fill("grace")
    await page.get_by_role("button", name="Search").click()
    await expect(page.locator("#messages li")).to_have_count(1)
    await context.close()


async def test_delete_all_asks_and_then_empties_the_inbox(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        await inbox_holding(api, 1)
    await live_inbox(page, dev_url)
    asked: list[str] = []

    async def decline(dialog: Dialog) -> None:
        asked.append(dialog.message)
        await dialog.dismiss()

    page.once("dialog", decline)
    await page.get_by_role("button", name="Delete all").click()
    await expect(page.locator("#count")).to_have_text("1 message")
    assert asked and "cannot be undone" in asked[0]
    page.once("dialog", lambda dialog: dialog.accept())
    await page.get_by_role("button", name="Delete all").click()
    await expect(page.locator("#empty")).to_be_visible()
    await expect(page.locator("#count")).to_have_text("0 messages")
    assert (await api.get("/dev/inbox.json")).json() == []


async def test_delete_all_without_its_confirmation_only_asks(api: httpx.AsyncClient) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        await inbox_holding(api, 1)
    asked = await api.post("/dev/inbox/delete-all", follow_redirects=True)
    assert asked.status_code == 200 and "Yes, delete all" in asked.text
    assert len((await api.get("/dev/inbox.json")).json()) == 1
    done = await api.post("/dev/inbox/delete-all", data={"confirm": "delete-all"})
    assert done.status_code == 303
    assert (await api.get("/dev/inbox.json")).json() == []


async def test_one_message_is_deleted_from_its_page(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    await request_verification(api, "ada@example.com")
    await request_verification(api, "grace@example.org")
    with anyio.fail_after(WAIT_SECONDS):
        grace, ada = await inbox_holding(api, 2)
    await page.goto(f"{dev_url}/dev/inbox/{ada['number']}")
    await page.get_by_role("button", name="Delete this message").click()
    await expect(page).to_have_url(dev_url + "/dev/inbox")
    assert [m["number"] for m in (await api.get("/dev/inbox.json")).json()] == [grace["number"]]
    gone = await api.post(f"/dev/inbox/{ada['number']}/delete")
    assert gone.status_code == 404


async def test_the_list_searches_the_subject_and_text_too(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    await live_inbox(page, dev_url)
    search = page.get_by_label("Search subject, addresses and text")
    await search.fill(mail["subject"].split()[0].upper())
    await expect(page.locator("#messages li")).to_have_count(1)
    await search.fill(mail["link"].split("token=")[1][:12])  # only in the body
    await expect(page.locator("#messages li")).to_have_count(1)
    await expect(page.locator("#messages li .preview")).not_to_be_empty()
    await expect(page.locator("#messages li .who")).to_contain_text("From ")


async def test_a_delivery_and_its_message_link_to_each_other(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    requested = await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    await page.goto(f"{dev_url}/dev/inbox/{mail['number']}")
    await page.locator("#console-delivery").click()
    await expect(page).to_have_url(f"{dev_url}/console/deliveries/{requested['id']}")
    await page.locator("#inbox-message").click()
    await expect(page).to_have_url(f"{dev_url}/dev/inbox/{mail['number']}")
    await page.get_by_role("link", name="Inbox").first.click()
    await expect(page).to_have_url(dev_url + "/dev/inbox")


async def test_the_check_tab_shows_the_link_answering_and_the_parts_agreeing(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    await page.goto(f"{dev_url}/dev/inbox/{mail['number']}?view=check")
    row = page.locator("#check-links tbody tr", has_text=mail["link"])
    await expect(row).to_contain_text("200")  # the confirm page answers, confirming nothing
    await expect(page.locator("#check-agree")).to_have_text("the same in both parts")
    await expect(page.locator("#check-over-limit")).to_have_text("0")
    await expect(page.locator("#check-size")).to_contain_text("bytes")
    [still] = (await api.get("/dev/inbox.json")).json()
    assert still["number"] == mail["number"]


async def test_on_a_phone_the_email_frame_grows_to_show_the_whole_email(
    api: httpx.AsyncClient, browser: Browser, dev: Dev, dev_url: str
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    context = await browser.new_context(viewport=PHONE)
    await sign_in_with_dev_key(context, dev)
    page = await context.new_page()
    await page.goto(f"{dev_url}/dev/inbox/{mail['number']}")
    email = page.frame_locator("iframe.email-frame")
    await expect(email.get_by_role("link", name="Confirm my email address")).to_be_visible()
    frame = page.locator("iframe.email-frame")
    content = await email.locator("html").evaluate("e => e.scrollHeight")
    await expect(frame).to_have_js_property("offsetHeight", content)
    assert content > PHONE["height"] * 0.75  # taller than the frame it started as
    await context.close()


async def test_another_site_cannot_empty_a_signed_in_browsers_inbox(
    api: httpx.AsyncClient, dev: Dev
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        await inbox_holding(api, 1)
    async with httpx.AsyncClient(base_url=dev.url) as browser_like:
        signed_in = await browser_like.post("/sign-in", data={"key": dev.key, "next": "/"})
        assert signed_in.status_code == 303
        # The session cookie goes along, as a browser would send it with another site's form.
        refused = await browser_like.post(
            "/dev/inbox/delete-all",
            headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
        )
    assert refused.status_code == 403
    assert len((await api.get("/dev/inbox.json")).json()) == 1


async def test_the_inbox_needs_the_dev_key(api: httpx.AsyncClient, dev: Dev) -> None:
    """Loopback is every local user's: without the key (or a browser signed in with it) the
    inbox and its live links are refused, and the start page shows nothing of them."""
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    guarded = [
        (method, route.path.replace("{number}", str(mail["number"])))
        for route in dev_routes.routes
        if isinstance(route, ScopedRoute) and route.access != "open"
        for method in sorted(route.methods or ())
    ]
    # Every route but the start page and the assets: a route added later is covered too.
    assert {path for _, path in guarded} >= {"/dev/inbox", "/dev/inbox/by-message-id"}
    async with httpx.AsyncClient(base_url=dev.url) as stranger:
        for method, path in guarded:
            refused = await stranger.request(
                method, path, params={"id": mail["message_id"]}, data={"confirm": "delete-all"}
            )
            assert refused.status_code == 401, (method, path)
            assert mail["link"] not in refused.text, (method, path)
        landing = await stranger.get("/")
        assert landing.status_code == 200 and mail["link"] not in landing.text
        page = await stranger.get("/dev/inbox", headers={"Accept": "text/html"})
        assert page.status_code == 401 and "API key" in page.text  # the sign-in form
    assert len((await api.get("/dev/inbox.json")).json()) == 1


async def test_messages_survive_a_restart_of_notifier_dev(
    dev_env: dict[str, str], dev_data: Path, browser: Browser
) -> None:
    async with dev_server(dev_env) as dev, dev.client() as api:
        await request_verification(api, "ada@example.com")
        with anyio.fail_after(WAIT_SECONDS):
            [before] = await inbox_holding(api, 1)
    assert list((dev_data / "inbox").glob("*.eml"))
    async with dev_server(dev_env) as dev, dev.client() as api:
        [after] = (await api.get("/dev/inbox.json")).json()
        assert (after["number"], after["link"]) == (before["number"], before["link"])
        context = await browser.new_context()
        await sign_in_with_dev_key(context, dev)
        page = await context.new_page()
        await page.goto(f"{dev.url}/dev/inbox/{after['number']}")
        await expect(page.locator("#verify-link")).to_have_attribute("href", before["link"])
        await context.close()


async def test_a_missing_message_says_so_and_leads_back_to_the_inbox(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    response = await page.goto(dev_url + "/dev/inbox/4242")
    assert response is not None and response.status == 404
    await expect(page.get_by_role("heading", level=1)).to_have_text("No such message")
    await page.get_by_role("main").get_by_role("link", name="Go to the inbox").click()
    await expect(page).to_have_url(dev_url + "/dev/inbox")
    not_a_number = await api.get("/dev/inbox/abc")
    assert not_a_number.status_code == 404 and "No such message" in not_a_number.text


@pytest.mark.parametrize("path", ["/", "/dev/inbox", "message", "/dev/inbox/4242"])
async def test_dev_pages_fit_a_390_px_phone_without_sideways_scrolling(
    api: httpx.AsyncClient, browser: Browser, dev: Dev, dev_url: str, path: str
) -> None:
    await request_verification(api, "someone.with.a.rather.long.address@subdomain.example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    context = await browser.new_context(viewport=PHONE)
    await sign_in_with_dev_key(context, dev)
    page = await context.new_page()
    await page.goto(dev_url + (f"/dev/inbox/{mail['number']}" if path == "message" else path))
    assert await horizontal_overflow(page) == 0
    await context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_dev_pages_text_has_enough_contrast(
    api: httpx.AsyncClient,
    browser: Browser,
    dev: Dev,
    dev_url: str,
    scheme: Literal["light", "dark"],
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    context = await browser.new_context(color_scheme=scheme)
    await sign_in_with_dev_key(context, dev)
    page = await context.new_page()
    for path in ("/", "/dev/inbox", f"/dev/inbox/{mail['number']}", "/dev/inbox/4242"):
        await page.goto(dev_url + path)
        assert await low_contrast(page) == [], path
        if path.endswith(str(mail["number"])):
            email = page.frame_locator("iframe.email-frame").locator("h1")
            await expect(email).to_be_visible()
            frame = page.frames[1]
            assert await low_contrast(frame) == [], "the email"
    await context.close()


async def test_the_inbox_can_be_used_with_the_keyboard_alone(
    api: httpx.AsyncClient, dev_url: str, page: Page
) -> None:
    await request_verification(api, "ada@example.com")
    with anyio.fail_after(WAIT_SECONDS):
        [mail] = await inbox_holding(api, 1)
    await live_inbox(page, dev_url)
    # Tab from the top of the page until the message is focused, then open it with Enter.
    for _ in range(12):
        await page.keyboard.press("Tab")
        if await page.evaluate("() => document.activeElement.classList.contains('message')"):
            break
    await page.keyboard.press("Enter")
    await expect(page).to_have_url(f"{dev_url}/dev/inbox/{mail['number']}")
    await page.locator("#verify-link").focus()
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("button", name="Confirm")).to_be_visible(timeout=BROWSER_WAIT_MS)


async def test_the_event_stream_sends_one_event_per_change(api: httpx.AsyncClient) -> None:
    with anyio.fail_after(WAIT_SECONDS):
        async with api.stream("GET", "/dev/inbox/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.aiter_lines()
            versions: list[str] = []
            async for line in lines:
                if line.startswith("data: "):
                    versions.append(line.removeprefix("data: "))
                    if len(versions) == 1:
                        await request_verification(api, "ada@example.com")
                    else:
                        break
    assert [int(v) for v in versions] == [0, 1]


async def test_notifier_dev_stops_promptly_with_an_inbox_page_still_listening(
    dev_env: dict[str, str],
) -> None:
    async with running_cli("dev", env=dev_env, capture_stdout=True) as cli:
        with anyio.fail_after(WAIT_SECONDS):
            ready = await wait_until_ready(cli)
        async with (
            ready_dev(ready).client() as api,
            api.stream("GET", "/dev/inbox/events") as stream,
        ):
            # Read up to the first event by hand: leaving an `async for` would close the stream.
            lines = stream.aiter_lines()
            with anyio.fail_after(WAIT_SECONDS):
                while not (await anext(lines)).startswith("data: "):
                    pass
            cli.process.send_signal(signal.SIGINT)
            with anyio.fail_after(WAIT_SECONDS):
                assert await cli.process.wait() == 0
