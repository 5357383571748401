"""The dev pages' HTML: the landing page, the inbox list, one message, and "no such message".

Plain HTML with one stylesheet and one script, both served by the package (no CDN, no build
step), so the pages work with no network. Every value is escaped here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Literal

from notifier.access import CSRF_FIELD
from notifier.inbox import Captured, Opened

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


def _page(title: str, main: str, *, current: str = "", script: bool = False) -> str:
    def nav_link(href: str, label: str) -> str:
        marker = ' aria-current="page"' if href == current else ""
        return f'<a href="{href}"{marker}>{label}</a>'

    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        '<meta name=color-scheme content="light dark">'
        f"<title>{escape(title)} · notifier dev</title>"
        f'<link rel=stylesheet href="{STYLESHEET}">'
        + (f'<script src="{SCRIPT}" defer></script>' if script else "")
        + "</head><body>"
        '<a class=skip href="#main">Skip to content</a>'
        '<header class=top><nav aria-label="notifier dev">'
        '<a class=brand href="/">notifier <span>dev</span></a>'
        + nav_link("/dev/inbox", "Inbox")
        + nav_link("/console", "Console")
        + nav_link("/docs", "API docs")
        + f"</nav></header><main id=main>{main}</main></body></html>"
    )


def _time(moment: datetime) -> str:
    return f'<time datetime="{moment.isoformat()}">{moment:%H:%M:%S}</time>'


def _count(number: int) -> str:
    return f"{number} message" + ("" if number == 1 else "s")


def _walk(base_url: str, key: str) -> str:
    """The README's first steps, with this server's address filled in."""
    base = escape(base_url.rstrip("/"))
    return (
        "<pre class=command><code>"
        f"curl -s -X POST {base}/v1/verifications \\\n"
        f"  -H &quot;{key}&quot; \\\n"
        "  -H 'Content-Type: application/json' -H 'Idempotency-Key: signup-ada-1' \\\n"
        "  -d '{&quot;user_id&quot;: &quot;ada&quot;, &quot;email&quot;: "
        "&quot;ada@example.com&quot;}'</code></pre>"
    )


def landing_page(base_url: str, key_file: Path) -> str:
    """What `/` shows in dev mode: where everything is, and the README's walk. The API key is
    named by its file, never shown: the page needs no key to be read, and shows nothing of
    the inbox (which does: every local user can reach loopback)."""
    base = escape(base_url.rstrip("/"))
    key = f"Authorization: Bearer $(cat {escape(str(key_file))})"
    return _page(
        "Welcome",
        "<h1>notifier dev is running</h1>"
        "<p class=lead>Everything in one process: an embedded PostgreSQL, the API, a worker, "
        "and an SMTP server whose mail lands in the inbox.</p>"
        '<ul class=cards aria-label="Where to go">'
        '<li><a href="/dev/inbox"><strong>Inbox</strong>'
        "<span>Every email notifier sent, as the reader sees it (sign in with the dev API "
        "key that <code>notifier dev</code> printed)</span></a></li>"
        '<li><a href="/console"><strong>Console</strong>'
        "<span>Queue health, each delivery's attempts, suppressions (sign in with the dev "
        "API key)</span></a></li>"
        '<li><a href="/docs"><strong>API docs</strong>'
        "<span>Every endpoint, to try from the browser (sign in with the dev API key "
        "that <code>notifier dev</code> printed)</span></a></li>"
        '<li><a href="#walk"><strong>Walk through a signup</strong>'
        "<span>The README's first steps, against this server</span></a></li>"
        "</ul>"
        '<h2 id=walk tabindex="-1">Walk through a signup</h2>'
        "<ol class=steps>"
        f"<li><p>Ask for a verification email for Ada:</p>{_walk(base_url, key)}</li>"
        '<li><p>Open the <a href="/dev/inbox">inbox</a>: the email is there within a second, '
        "and the list shows it by itself.</p></li>"
        "<li><p>Open the message, press <strong>Open the verification link</strong>, then "
        "<strong>Confirm</strong>: the page says the address is verified.</p></li>"
        "<li><p>Ask the API: the verification is now <code>sent</code> and "
        "<code>verified</code>.</p>"
        f"<pre class=command><code>curl -s -H &quot;{key}&quot; \\\n"
        f"  {base}/v1/verifications/&lt;id&gt;</code></pre></li>"
        '<li><p>Or look it up in the <a href="/console/deliveries">console</a> by '
        "<code>ada@example.com</code>: its attempt, who claimed it and what the mail server "
        "said.</p></li>"
        "</ol>",
    )


def _message_item(message: Captured) -> str:
    badge = "<span class=badge>link</span>" if message.link else ""
    return (
        f'<li><a class=message href="/dev/inbox/{message.number}">'
        f"<span class=subject>{escape(message.subject or '(no subject)')}</span>"
        f"<span class=who>To {escape(', '.join(message.recipients))}</span>"
        f"{_time(message.received_at)}{badge}</a></li>"
    )


def inbox_page(
    messages: Sequence[Captured], total: int, query: str, version: int, csrf: str
) -> str:
    """The list: newest first, filtered by `query`, kept current by inbox.js. `csrf`: the
    token a signed-in browser's Delete all form carries ("" for a bearer key)."""
    shown = "" if not query else f" · {len(messages)} shown"
    empty_text = (
        f"No message to or from an address containing “{escape(query)}”."
        if query
        else "No mail yet. Ask for a verification (see the walk on the "
        '<a href="/">start page</a>) and it appears here by itself.'
    )
    return _page(
        "Inbox",
        "<div class=heading><h1>Inbox</h1>"
        f"<p class=count id=count>{_count(total)}{shown}</p></div>"
        "<div class=toolbar>"
        '<form class=search role=search method=get action="/dev/inbox">'
        "<label for=q>Search by address</label>"
        f'<span class=field><input id=q name=q type=search value="{escape(query)}" '
        'placeholder="ada@example.com" autocomplete=off spellcheck=false>'
        "<button type=submit>Search</button></span></form>"
        '<form class=clear method=post action="/dev/inbox/delete-all">'
        f'<input type=hidden name="{CSRF_FIELD}" value="{escape(csrf)}">'
        "<button type=submit class=danger>Delete all</button></form>"
        "</div>"
        "<p class=live id=live role=status>Updates appear by themselves.</p>"
        f'<ol class=messages id=messages data-version="{version}" '
        'aria-label="Messages, newest first">'
        + "".join(_message_item(m) for m in messages)
        + "</ol>"
        + f"<p class=empty id=empty{'' if not messages else ' hidden'}>{empty_text}</p>",
        current="/dev/inbox",
        script=True,
    )


def _views_nav(number: int, chosen: View, has_html: bool) -> str:
    links = []
    for view, label in VIEWS.items():
        if view == "html" and not has_html:
            continue
        marker = ' aria-current="page"' if view == chosen else ""
        links.append(f'<a href="/dev/inbox/{number}?view={view}"{marker}>{label}</a>')
    return f'<nav class=views aria-label="Show the message as">{"".join(links)}</nav>'


def _view(opened: Opened, chosen: View) -> str:
    number = opened.captured.number
    if chosen == "html":
        return (
            '<div class=frame-wrap><iframe class=email-frame title="The HTML part of the message" '
            f'sandbox="{FRAME_SANDBOX}" referrerpolicy=no-referrer '
            f'src="/dev/inbox/{number}/html"></iframe></div>'
        )
    if chosen == "text":
        if opened.text is None:
            return "<p class=empty>This message has no plain-text part.</p>"
        return f"<pre class=source>{escape(opened.text)}</pre>"
    if chosen == "headers":
        rows = "".join(
            f"<tr><th scope=row>{escape(name)}</th><td>{escape(value)}</td></tr>"
            for name, value in opened.headers
        )
        return f"<div class=table-wrap><table class=headers>{rows}</table></div>"
    source = opened.raw.decode("utf-8", "replace")
    return (
        f'<p><a class=secondary href="/dev/inbox/{number}/raw" download="message-{number}.eml">'
        f"Download the .eml file</a></p><pre class=source>{escape(source)}</pre>"
    )


def message_page(opened: Opened, chosen: View) -> str:
    """One message: who, when, the verification link as a button, and a switch between its
    HTML part, text part, headers and raw source."""
    message = opened.captured
    link = ""
    if message.link:
        link = (
            f'<p class=actions><a id=verify-link class=button href="{escape(message.link)}">'
            "Open the verification link</a></p>"
        )
    return _page(
        message.subject or "(no subject)",
        '<p class=back><a href="/dev/inbox">← Back to the inbox</a></p>'
        f"<h1 class=subject-title>{escape(message.subject or '(no subject)')}</h1>"
        "<dl class=meta>"
        f"<dt>From</dt><dd>{escape(message.sender)}</dd>"
        f"<dt>To</dt><dd>{escape(', '.join(message.recipients))}</dd>"
        f"<dt>Received</dt><dd>{_time(message.received_at)}</dd>"
        f"<dt>Message-ID</dt><dd><code>{escape(message.message_id)}</code></dd>"
        "</dl>"
        f"{link}{_views_nav(message.number, chosen, opened.html is not None)}"
        f'<section class=view aria-label="{VIEWS[chosen]}">{_view(opened, chosen)}</section>',
        current="/dev/inbox",
    )


def not_found_page(number: str, capacity: int) -> str:
    return _page(
        "No such message",
        '<p class=back><a href="/dev/inbox">← Back to the inbox</a></p>'
        "<h1>No such message</h1>"
        f"<p>There is no message {escape(number[:20])}. It was deleted, or newer mail pushed "
        f"it out (the inbox keeps the newest {capacity}).</p>"
        '<p><a class=button href="/dev/inbox">Go to the inbox</a></p>',
        current="/dev/inbox",
    )
