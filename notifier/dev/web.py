"""The dev inbox over HTTP: its pages, JSON, live event stream and assets; and `/`, the dev
landing page. Mounted only by `notifier dev`."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, get_args

import anyio
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.responses import StreamingResponse

from notifier.dev import check as message_check
from notifier.dev import pages as inbox_pages
from notifier.dev.inbox import Captured, Inbox
from notifier.dev.pages import CONFIRM_FIELD, CONFIRM_VALUE, View
from notifier.web.access import DEV_KEY_FILE, ScopedRoute, access, csrf_token_of
from notifier.web.console.routes import DEV_INBOX

# An idle event stream sends a comment this often (seconds), so a dead client is noticed
# and no proxy times the stream out.
HEARTBEAT_SECONDS = 15.0
# How long a browser waits before reconnecting a dropped event stream (milliseconds).
RECONNECT_MS = 2000
# Longest search string taken (an address is at most 254 characters; a subject or a phrase
# of the text fits too).
MAX_QUERY_CHARS = 254

# The inbox pages run only this package's script and stylesheet, talk only to this origin,
# frame only this origin's email view, and are never framed themselves.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-src 'self'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    ),
    # Message pages carry live links in their URLs' pages: no referrer may take them along.
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
# The one script the email's frame runs: it posts the email's height to the inbox page,
# which grows the frame to fit (inbox.js), so nothing is cut off at any width. The frame's
# origin is opaque, so a message is all it can pass out.
FRAME_SCRIPT = (
    "(()=>{const tell=()=>parent.postMessage({emailHeight:"
    "document.documentElement.scrollHeight},'*');addEventListener('load',tell);"
    "new ResizeObserver(tell).observe(document.documentElement)})()"
)
FRAME_SCRIPT_HASH = base64.b64encode(hashlib.sha256(FRAME_SCRIPT.encode()).digest()).decode()
# The email's own HTML: sandboxed even when opened on its own (the CSP sandbox directive),
# with an opaque origin, no script but FRAME_SCRIPT (by its hash: the email's own scripts
# and inline handlers are blocked), nothing fetched from the network, and framed only here.
FRAME_HEADERS = {
    "Content-Security-Policy": (
        f"sandbox {inbox_pages.FRAME_SANDBOX}; default-src 'none'; "
        f"script-src 'sha256-{FRAME_SCRIPT_HASH}'; style-src 'unsafe-inline'; "
        "img-src data:; font-src data:; base-uri 'none'; frame-ancestors 'self'"
    ),
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
# The start page and the assets are open; the inbox is not. Loopback is every local user's:
# the mail holds live links, so reading it takes the dev key (or a browser signed in with
# it), and emptying it the admin scope the dev key has.
OPEN = access("open")
READ = access("read")
ADMIN = access("admin")
_ASSETS = {"inbox.css": "text/css; charset=utf-8", "inbox.js": "text/javascript; charset=utf-8"}
# What may follow "<head" in the tag itself (not "<header").
_AFTER_HEAD = frozenset(b" \t\r\n\f>/")


def add_routes(
    app: FastAPI, inbox: Inbox, key_file: Path, probed: frozenset[str] = frozenset()
) -> None:
    """`/`, `/dev/inbox` (list), `/dev/inbox/{n}` (one message, `?view=html|text|headers|raw`),
    `/dev/inbox/{n}/html` and `/raw`, `/dev/inbox.json`, `/dev/inbox/events` (server-sent
    events), `/dev/inbox/by-message-id?id=`, `POST /dev/inbox/delete-all` and
    `/dev/inbox/{n}/delete`, and `/dev/static/*`, over `inbox`. Marks the app as dev's
    (DEV_INBOX), so the console links its deliveries to their messages here. `probed`: the
    origins (`http://127.0.0.1:8001`) whose links the check tab may fetch."""
    app.state.inbox = inbox
    setattr(app.state, DEV_INBOX, True)
    setattr(app.state, DEV_KEY_FILE, key_file)
    app.state.dev_probed = frozenset(origin.lower().rstrip("/") for origin in probed)
    app.include_router(routes)


async def _inbox(request: Request) -> Inbox:
    return request.app.state.inbox  # type: ignore[no-any-return]


Captures = Annotated[Inbox, Depends(_inbox)]
routes = APIRouter(route_class=ScopedRoute)


@routes.get("/", response_class=HTMLResponse, include_in_schema=False, **OPEN)
async def landing(request: Request) -> HTMLResponse:
    key_file: Path = getattr(request.app.state, DEV_KEY_FILE)
    page = inbox_pages.landing_page(str(request.base_url), key_file)
    return HTMLResponse(page, headers=PAGE_HEADERS)


@routes.get("/dev/inbox", response_class=HTMLResponse, include_in_schema=False, **READ)
async def inbox_list(
    request: Request, inbox: Captures, q: str = "", confirm: str = ""
) -> HTMLResponse:
    query = q[:MAX_QUERY_CHARS]
    page = inbox_pages.inbox_page(
        inbox.search(query),
        len(inbox.messages),
        query,
        inbox.version,
        csrf_token_of(request),
        confirming=confirm == CONFIRM_VALUE and bool(inbox.messages),
    )
    return HTMLResponse(page, headers=PAGE_HEADERS)


@routes.get("/dev/inbox.json", include_in_schema=False, **READ)
async def inbox_json(inbox: Captures, q: str = "") -> JSONResponse:
    listed = [_summary(m) for m in inbox.search(q[:MAX_QUERY_CHARS])]
    headers = {
        "Cache-Control": "no-store",
        # How many there are in all, whatever the search, and which state this is.
        "X-Inbox-Total": str(len(inbox.messages)),
        "X-Inbox-Version": str(inbox.version),
    }
    return JSONResponse(listed, headers=headers)


@routes.get("/dev/inbox/events", include_in_schema=False, **READ)
async def inbox_events(inbox: Captures) -> StreamingResponse:
    return StreamingResponse(
        _events(inbox),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@routes.post("/dev/inbox/delete-all", include_in_schema=False, **ADMIN)
async def delete_all(request: Request, inbox: Captures) -> Response:
    # ScopedRoute checked the key, and for a signed-in browser this site and its page's
    # CSRF token: no other site's form can empty the inbox. Without the confirm field the
    # list asks first: one click never empties it.
    if (await request.form()).get(CONFIRM_FIELD) != CONFIRM_VALUE:
        target = f"/dev/inbox?{CONFIRM_FIELD}={CONFIRM_VALUE}"
        return RedirectResponse(target, status_code=303, headers=PAGE_HEADERS)
    inbox.clear()
    return RedirectResponse("/dev/inbox", status_code=303, headers=PAGE_HEADERS)


@routes.post("/dev/inbox/{number}/delete", include_in_schema=False, **ADMIN)
async def delete_one(inbox: Captures, number: int) -> Response:
    # Guarded as Delete all is (the key; for a browser, this site and its CSRF token).
    if not inbox.delete(number):
        return HTMLResponse(
            inbox_pages.not_found_page(str(number), inbox.capacity), 404, PAGE_HEADERS
        )
    return RedirectResponse("/dev/inbox", status_code=303, headers=PAGE_HEADERS)


@routes.get("/dev/inbox/by-message-id", include_in_schema=False, **READ)
async def by_message_id(inbox: Captures, id: str = "") -> Response:
    """The newest message with this Message-ID: how the console's delivery page links here."""
    found = inbox.find_by_message_id(id[:MAX_QUERY_CHARS])
    if found is None:
        page = inbox_pages.not_found_page(id[:MAX_QUERY_CHARS], inbox.capacity)
        return HTMLResponse(page, 404, PAGE_HEADERS)
    return RedirectResponse(f"/dev/inbox/{found.number}", status_code=303, headers=PAGE_HEADERS)


@routes.get("/dev/inbox/{number}", response_class=HTMLResponse, include_in_schema=False, **READ)
async def message_page(
    request: Request, inbox: Captures, number: str, view: str = ""
) -> HTMLResponse:
    opened = inbox.open(int(number)) if number.isdigit() else None
    if opened is None:
        return HTMLResponse(inbox_pages.not_found_page(number, inbox.capacity), 404, PAGE_HEADERS)
    chosen: View = view if view in get_args(View) else "html"  # type: ignore[assignment]
    if chosen == "html" and opened.html is None:
        chosen = "text"
    probed = request.app.state.dev_probed
    checked = await message_check.check(opened, probed) if chosen == "check" else None
    page = inbox_pages.message_page(opened, chosen, csrf_token_of(request), checked)
    return HTMLResponse(page, headers=PAGE_HEADERS)


@routes.get("/dev/inbox/{number}/html", include_in_schema=False, **READ)
async def message_html(inbox: Captures, number: int) -> Response:
    opened = inbox.open(number)
    if opened is None or opened.html is None:
        return Response("No HTML part.", 404, FRAME_HEADERS, "text/plain; charset=utf-8")
    return Response(_framed(opened.html), 200, FRAME_HEADERS, "text/html")


@routes.get("/dev/inbox/{number}/raw", include_in_schema=False, **READ)
async def message_raw(inbox: Captures, number: int) -> Response:
    opened = inbox.open(number)
    if opened is None:
        return Response("No such message.", 404, PAGE_HEADERS, "text/plain; charset=utf-8")
    headers = {
        **PAGE_HEADERS,
        "Content-Disposition": f'attachment; filename="message-{number}.eml"',
    }
    return Response(opened.raw, 200, headers, "message/rfc822")


@routes.get("/dev/static/{name}", include_in_schema=False, **OPEN)
async def asset(name: str) -> Response:
    if name not in _ASSETS:
        return Response("Not found.", 404, media_type="text/plain")
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    return Response(_asset(name), 200, headers, _ASSETS[name])


def _summary(message: Captured) -> dict[str, Any]:
    return {
        "number": message.number,
        "to": list(message.recipients),
        "from": message.sender,
        "subject": message.subject,
        "message_id": message.message_id,
        "link": message.link,
        "code": message.code,
        "received_at": message.received_at.isoformat(),
        "has_html": message.has_html,
        "preview": message.preview,
    }


async def _events(inbox: Inbox) -> AsyncIterator[str]:
    """An `inbox` event with the inbox's version now and after every change; a comment when
    idle. Ends when the inbox closes (at shutdown), so the server can stop."""
    seen = inbox.version
    yield f"retry: {RECONNECT_MS}\nevent: inbox\ndata: {seen}\n\n"
    while not inbox.closed:
        with anyio.move_on_after(HEARTBEAT_SECONDS):
            await inbox.wait_beyond(seen)
        if inbox.closed:
            return
        if inbox.version == seen:
            yield ": idle\n\n"
            continue
        seen = inbox.version
        yield f"event: inbox\ndata: {seen}\n\n"


def _framed(html: str) -> bytes:
    """The email with `<base target="_blank">`: in the sandboxed frame a link may only open a
    new tab (the verify page refuses to be framed); a long link wraps, as mail clients wrap
    it, rather than running out of a narrow frame cut mid-token; and FRAME_SCRIPT."""
    body = html.encode("utf-8")
    added = (
        b'<base target="_blank"><style>a{overflow-wrap:anywhere}</style><script>'
        + FRAME_SCRIPT.encode()
        + b"</script>"
    )
    end = _head_end(body)
    if end is None:
        return added + body
    return body[:end] + added + body[end:]


def _head_end(body: bytes) -> int | None:
    """Where the email's `<head ...>` tag ends, found in one pass (anyone local can mail
    the inbox: a regex over "<head" without a ">" would rescan the rest from each one)."""
    lower = body.lower()
    start = 0
    while (at := lower.find(b"<head", start)) != -1:
        start = at + len(b"<head")
        if body[start : start + 1] and body[start] in _AFTER_HEAD:
            close = body.find(b">", start)
            return None if close == -1 else close + 1
    return None


@cache
def _asset(name: str) -> bytes:
    return resources.files("notifier").joinpath("static", name).read_bytes()
