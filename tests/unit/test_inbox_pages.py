"""The dev pages' HTML: fit for a phone, escaped, and never a dead end."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from notifier.dev import pages as inbox_pages
from notifier.dev.inbox import Captured, Opened
from notifier.dev.pages import View

KEY_FILE = Path(".notifier/dev-api-key")
HOSTILE = '<script>alert("x")</script>'
CAPTURED = Captured(
    number=7,
    received_at=datetime(2025, 6, 1, 12, 0, 5, tzinfo=UTC),
    message_id="<verify.1@notifier.localhost>",
    sender="Acme <noreply@acme.test>",
    recipients=("ada@example.com",),
    subject=HOSTILE,
    link="http://127.0.0.1:8000/verify?token=k1.abc",
    has_html=True,
)
OPENED = Opened(
    captured=CAPTURED,
    raw=b"Subject: x\r\n\r\n" + HOSTILE.encode(),
    text=HOSTILE,
    html=f"<p>{HOSTILE}</p>",
    headers=(("Subject", HOSTILE),),
)


def every_page() -> dict[str, str]:
    pages = {
        "landing": inbox_pages.landing_page("http://127.0.0.1:8000/", KEY_FILE),
        "inbox": inbox_pages.inbox_page([CAPTURED], 1, "", 4, "csrf-token"),
        "empty inbox": inbox_pages.inbox_page([], 0, "", 0, ""),
        "not found": inbox_pages.not_found_page("12", 500),
    }
    for view in ("html", "text", "headers", "raw"):
        pages[f"message ({view})"] = inbox_pages.message_page(OPENED, view)
    return pages


@pytest.mark.parametrize("name", list(every_page()))
def test_every_dev_page_has_a_viewport_language_and_charset(name: str) -> None:
    page = every_page()[name]
    assert '<meta name=viewport content="width=device-width,initial-scale=1">' in page
    assert page.startswith("<!doctype html><html lang=en><head><meta charset=utf-8>")


@pytest.mark.parametrize("name", list(every_page()))
def test_no_dev_page_carries_inline_script_or_style(name: str) -> None:
    # The pages' CSP allows only the package's own files: inline code would be blocked.
    page = every_page()[name]
    assert "<style" not in page and " style=" not in page
    assert re.findall(r"<script[^>]*>", page) in ([], ['<script src="/dev/static/inbox.js" defer>'])


def test_no_such_message_page_leads_back_to_the_inbox() -> None:
    page = inbox_pages.not_found_page("12", 500)
    assert "<h1>No such message</h1>" in page
    assert page.count('href="/dev/inbox"') >= 2  # the nav, and a way back in the page itself


def test_message_values_are_escaped_on_every_view() -> None:
    for view in ("html", "text", "headers", "raw"):
        page = inbox_pages.message_page(OPENED, view)
        assert HOSTILE not in page, view
        assert "&lt;script&gt;" in page, view


def test_html_view_is_a_frame_without_scripts_or_same_origin() -> None:
    page = inbox_pages.message_page(OPENED, "html")
    frame = re.search(r"<iframe[^>]*>", page)
    assert frame is not None
    sandbox = re.search(r'sandbox="([^"]*)"', frame.group(0))
    assert sandbox is not None
    assert "allow-scripts" not in sandbox.group(1) and "allow-same-origin" not in sandbox.group(1)
    assert 'src="/dev/inbox/7/html"' in frame.group(0)


def test_verification_link_is_a_button_on_the_message_page() -> None:
    page = inbox_pages.message_page(OPENED, "text")
    assert (
        '<a id=verify-link class=button href="http://127.0.0.1:8000/verify?token=k1.abc">' in page
    )


@pytest.mark.parametrize("view", ["html", "text", "headers", "raw"])
def test_the_view_switch_marks_the_current_view(view: View) -> None:
    page = inbox_pages.message_page(OPENED, view)
    assert f'href="/dev/inbox/7?view={view}" aria-current="page"' in page
    assert page.count('aria-current="page"') == 2  # the view, and Inbox in the top bar


def test_landing_page_links_the_inbox_the_docs_and_the_walk() -> None:
    page = inbox_pages.landing_page("http://127.0.0.1:8000/", KEY_FILE)
    for target in ('href="/dev/inbox"', 'href="/docs"', 'href="#walk"', "id=walk"):
        assert target in page
    assert "curl -s -X POST http://127.0.0.1:8000/v1/verifications" in page
    # The key is named by its file, never printed in a page anyone local can read.
    assert "Bearer $(cat .notifier/dev-api-key)" in page and "nfk_" not in page
