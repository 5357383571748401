"""The dev pages: the landing page, the inbox list, one message, and "no such message",
rendered from templates/dev/ (which extend the web wing's base layout).

Plain HTML with one stylesheet and one script, both served by the package (no CDN, no build
step), so the pages work with no network. Every value is escaped by the templates.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal

from notifier.dev.check import MUST_LINE_CHARS, SHOULD_LINE_CHARS, Check
from notifier.dev.inbox import Captured, Opened
from notifier.web.access import CSRF_FIELD
from notifier.web.templating import render

View = Literal["html", "text", "headers", "raw", "check"]
VIEWS: dict[View, str] = {
    "html": "HTML",
    "text": "Text",
    "headers": "Headers",
    "raw": "Raw source",
    "check": "Check",
}
# The form field, and its value, that Delete all needs: a post without it asks first instead
# of deleting, so one click never empties the inbox (inbox.js asks with a dialog, then adds
# it).
CONFIRM_FIELD = "confirm"
CONFIRM_VALUE = "delete-all"
STYLESHEET = "/dev/static/inbox.css"
SCRIPT = "/dev/static/inbox.js"
# The email's HTML is shown in a frame that may open links in a new tab, run the one script
# the inbox adds (it tells this page the email's height, so the frame grows to fit; the
# frame's CSP allows that script by its hash and no other), and nothing else: no forms, and
# an opaque origin (no "allow-same-origin"), so even a script that got past the CSP could
# touch neither this page nor the API. Never add "allow-same-origin" next to
# "allow-scripts": the two together undo the sandbox.
FRAME_SANDBOX = "allow-scripts allow-popups allow-popups-to-escape-sandbox"


def _render(template: str, *, current: str = "", script: bool = False, **values: object) -> str:
    return render(
        template,
        "notifier.dev",
        stylesheet=STYLESHEET,
        script=SCRIPT if script else None,
        current=current,
        **values,
    )


def landing_page(base_url: str, key_file: Path) -> str:
    """What `/` shows in dev mode: where everything is, and the README's walk. The API key is
    named by its file, never shown: the page needs no key to be read, and shows nothing of
    the inbox (which does: every local user can reach loopback)."""
    return _render("dev/landing.html", base=base_url.rstrip("/"), key_file=str(key_file))


def inbox_page(
    messages: Sequence[Captured],
    total: int,
    query: str,
    version: int,
    csrf: str,
    *,
    confirming: bool = False,
) -> str:
    """The list: newest first, filtered by `query`, kept current by inbox.js. `csrf`: the
    token a signed-in browser's Delete all form carries ("" for a bearer key);
    `confirming`: Delete all was pressed without its confirmation, so the page asks."""
    return _render(
        "dev/inbox.html",
        current="/dev/inbox",
        script=True,
        messages=messages,
        total=total,
        query=query,
        version=version,
        csrf=csrf,
        csrf_field=CSRF_FIELD,
        confirming=confirming,
        confirm_field=CONFIRM_FIELD,
        confirm_value=CONFIRM_VALUE,
        today=datetime.now().astimezone().date(),
    )


def message_page(opened: Opened, chosen: View, csrf: str, checked: Check | None = None) -> str:
    """One message: who, when, the verification link as a button, its delivery in the
    console, Delete, and a switch between its HTML part, text part, headers, raw source
    and the check (`checked`, when that is the view chosen)."""
    return _render(
        "dev/message.html",
        current="/dev/inbox",
        script=True,
        opened=opened,
        chosen=chosen,
        views=VIEWS,
        sandbox=FRAME_SANDBOX,
        csrf=csrf,
        csrf_field=CSRF_FIELD,
        checked=checked,
        should_chars=SHOULD_LINE_CHARS,
        must_chars=MUST_LINE_CHARS,
    )


def not_found_page(number: str, capacity: int) -> str:
    return _render("dev/not_found.html", current="/dev/inbox", number=number, capacity=capacity)
