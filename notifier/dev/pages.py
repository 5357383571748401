"""The dev pages: the landing page, the inbox list, one message, and "no such message",
rendered from templates/dev/ (which extend the web wing's base layout).

Plain HTML with one stylesheet and one script, both served by the package (no CDN, no build
step), so the pages work with no network. Every value is escaped by the templates.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from notifier.dev.inbox import Captured, Opened
from notifier.web.access import CSRF_FIELD
from notifier.web.templating import render

View = Literal["html", "text", "headers", "raw"]
VIEWS: dict[View, str] = {
    "html": "HTML",
    "text": "Text",
    "headers": "Headers",
    "raw": "Raw source",
}
STYLESHEET = "/dev/static/inbox.css"
SCRIPT = "/dev/static/inbox.js"
# The email's HTML is shown in a frame that may open links in a new tab and nothing else:
# no scripts, no forms, and an opaque origin (no "allow-same-origin"), so it can touch
# neither this page nor the API.
FRAME_SANDBOX = "allow-popups allow-popups-to-escape-sandbox"


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
    messages: Sequence[Captured], total: int, query: str, version: int, csrf: str
) -> str:
    """The list: newest first, filtered by `query`, kept current by inbox.js. `csrf`: the
    token a signed-in browser's Delete all form carries ("" for a bearer key)."""
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
    )


def message_page(opened: Opened, chosen: View) -> str:
    """One message: who, when, the verification link as a button, and a switch between its
    HTML part, text part, headers and raw source."""
    return _render(
        "dev/message.html",
        current="/dev/inbox",
        opened=opened,
        chosen=chosen,
        views=VIEWS,
        sandbox=FRAME_SANDBOX,
    )


def not_found_page(number: str, capacity: int) -> str:
    return _render("dev/not_found.html", current="/dev/inbox", number=number, capacity=capacity)
