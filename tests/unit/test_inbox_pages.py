"""The dev pages' HTML: fit for a phone, escaped, and never a dead end."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from notifier.dev import pages as inbox_pages
from notifier.dev.check import Check, Link, LongLine, Probe
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

CHECKED = Check(
    links=(
        Link(CAPTURED.link or "", True, True, Probe("answered", status=200)),
        Link(f"http://127.0.0.1:9/{HOSTILE}", False, True, Probe("refused", detail="not probed")),
    ),
    code="123 456",
    size=12_345,
    long_lines=(LongLine(3, 120), LongLine(9, 1200)),
    has_text=True,
    has_html=True,
)


def every_page() -> dict[str, str]:
    pages = {
        "landing": inbox_pages.landing_page("http://127.0.0.1:8000/", KEY_FILE),
        "inbox": inbox_pages.inbox_page([CAPTURED], 1, "", 4, "csrf-token"),
        "empty inbox": inbox_pages.inbox_page([], 0, "", 0, ""),
        "not found": inbox_pages.not_found_page("12", 500),
    }
    for view in ("html", "text", "headers", "raw"):
        pages[f"message ({view})"] = inbox_pages.message_page(OPENED, view, "csrf-token")
    pages["message (check)"] = inbox_pages.message_page(OPENED, "check", "", CHECKED)
    pages["inbox (confirming delete all)"] = inbox_pages.inbox_page(
        [CAPTURED], 1, "", 4, "", confirming=True
    )
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
        page = inbox_pages.message_page(OPENED, view, "")
        assert HOSTILE not in page, view
        assert "&lt;script&gt;" in page, view


def test_html_view_is_a_frame_with_an_opaque_origin() -> None:
    page = inbox_pages.message_page(OPENED, "html", "")
    frame = re.search(r"<iframe[^>]*>", page)
    assert frame is not None
    sandbox = re.search(r'sandbox="([^"]*)"', frame.group(0))
    assert sandbox is not None
    # Scripts (only the one the frame's CSP names by hash) but never this origin as well.
    assert sandbox.group(1).split() == [
        "allow-scripts",
        "allow-popups",
        "allow-popups-to-escape-sandbox",
    ]
    assert 'src="/dev/inbox/7/html"' in frame.group(0)


def test_verification_link_is_a_button_on_the_message_page() -> None:
    page = inbox_pages.message_page(OPENED, "text", "")
    assert (
        '<a id=verify-link class=button href="http://127.0.0.1:8000/verify?token=k1.abc">' in page
    )


@pytest.mark.parametrize("view", ["html", "text", "headers", "raw", "check"])
def test_the_view_switch_marks_the_current_view(view: View) -> None:
    page = inbox_pages.message_page(OPENED, view, "", CHECKED)
    assert f'href="/dev/inbox/7?view={view}" aria-current="page"' in page
    assert page.count('aria-current="page"') == 2  # the view, and Inbox in the top bar


def test_landing_page_links_the_inbox_the_docs_and_the_walk() -> None:
    page = inbox_pages.landing_page("http://127.0.0.1:8000/", KEY_FILE)
    for target in ('href="/dev/inbox"', 'href="/docs"', 'href="#walk"', "id=walk"):
        assert target in page
    assert "curl -s -X POST http://127.0.0.1:8000/v1/verifications" in page
    # The key is named by its file, never printed in a page anyone local can read.
    assert "Bearer $(cat .notifier/dev-api-key)" in page and "nfk_" not in page


def test_the_message_page_deletes_it_with_the_pages_csrf_token() -> None:
    page = inbox_pages.message_page(OPENED, "text", "csrf-token")
    form = re.search(
        r'<form class=delete-one method=post action="/dev/inbox/7/delete">.*?</form>', page
    )
    assert form is not None
    assert 'value="csrf-token"' in form.group(0)


def test_the_check_tab_shows_size_lines_code_and_each_links_parts_and_answer() -> None:
    page = inbox_pages.message_page(OPENED, "check", "", CHECKED)
    assert "<dd id=check-size>12,345 bytes</dd>" in page
    assert "(line 3, 9)" in page and "RFC 5322 forbids them" in page
    assert "<code class=code>123 456</code>" in page
    assert "they differ" in page  # the second link is in the HTML part only
    rows = re.findall(r"<tr><td class=target>.*?</tr>", page)
    assert len(rows) == 2
    assert '<td>yes</td><td>yes</td><td class="answer answered">200' in rows[0]
    assert '<td>no</td><td>yes</td><td class="answer refused">refused' in rows[1]


def test_the_list_shows_sender_preview_and_the_date_of_older_mail() -> None:
    older = dataclasses.replace(CAPTURED, preview="Hello Ada, confirm your address")
    page = inbox_pages.inbox_page([older], 1, "", 4, "")
    assert "From Acme &lt;noreply@acme.test&gt; · To ada@example.com" in page
    assert "<span class=preview>Hello Ada, confirm your address</span>" in page
    assert ">2025-06-01 " in page  # not today's: its date is shown with its time


def test_delete_all_asks_before_it_deletes() -> None:
    asking = inbox_pages.inbox_page([CAPTURED], 1, "", 4, "t", confirming=True)
    assert "Delete all 1 message?" in asking
    assert '<input type=hidden name="confirm" value="delete-all">' in asking
    plain = inbox_pages.inbox_page([CAPTURED], 1, "", 4, "t")
    assert "Yes, delete all" not in plain
