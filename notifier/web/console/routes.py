"""The delivery console's routes on the internal listener: queue health at /console, delivery
search and timelines at /console/deliveries, suppressions at /console/suppressions, webhook
endpoints and their deliveries at /console/webhooks.

Reading needs the `read` scope; clearing a suppression, resending a failed delivery and
replaying a dead webhook need `admin` (notifier.web.access checks both, and the CSRF token
of a signed-in browser's forms).
Changes answer with a redirect to the page that shows their result (POST, then GET), so a
reload never repeats them.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, FastAPI, Form, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from markupsafe import Markup

from notifier.storage import suppressions, webhooks
from notifier.storage.queries import sql
from notifier.verifications import InvalidRequest, Suppressed, Throttled
from notifier.web.access import ScopedRoute, access, csrf_token_of, principal_of
from notifier.web.console import data as console_data
from notifier.web.console import webhook_data
from notifier.web.console.data import Resend
from notifier.web.console.pages import (
    PAGE_HEADERS,
    Viewer,
    delivery_page,
    endpoint_page,
    missing_delivery_page,
    missing_endpoint_page,
    queue_page,
    search_page,
    suppressions_page,
    webhooks_page,
)
from notifier.web.listeners import Conn, Svc
from notifier.web.templating import render

# What a page says after the change that led to it (?notice=...): fixed texts, so a link
# cannot make the console say anything else.
NOTICES = {
    "resent": "A new link is on its way: this is its delivery.",
    "already-resent": "A new link was already sent for that delivery: this is its delivery.",
    "cleared": "The suppression was cleared: requests for that address are accepted again.",
    "not-suppressed": "That address was not suppressed; nothing changed.",
    "replayed": "The delivery is on its way again, with a fresh retry schedule.",
}
# The stylesheet: the dev inbox's (one visual language), then the console's own rules.
_STYLESHEETS = ("inbox.css", "console.css")
# The longest address a form takes (RFC 5321 allows 254; some slack for spaces).
_MAX_ADDRESS_CHARS = 320


# The console's pages, forms and stylesheet.
console = APIRouter(prefix="/console", route_class=ScopedRoute, include_in_schema=False)
# `/` outside dev: the internal listener's front door is the console.
home = APIRouter(route_class=ScopedRoute, include_in_schema=False)
# Where `mount` keeps NOTIFIER_TRACE_URL_TEMPLATE on the app's state.
TRACE_URL_STATE = "trace_url"
# The app state notifier dev sets beside its inbox: the console links to the inbox then.
DEV_INBOX = "dev_inbox"


def mount(app: FastAPI, *, trace_url: str | None = None, with_home: bool = True) -> None:
    """The console on the internal app. `trace_url`: where it links trace ids
    (NOTIFIER_TRACE_URL_TEMPLATE); `with_home`: `/` leads to it (False: another serves
    `/`, as `notifier dev` does)."""
    setattr(app.state, TRACE_URL_STATE, trace_url)
    app.include_router(console)
    if with_home:
        app.include_router(home)


@console.get("", **access("read"))
async def queue(request: Request, conn: Conn) -> Response:
    snapshot = await console_data.queue_snapshot(conn)
    return _html(queue_page(snapshot, _viewer(request), datetime.now(UTC)))


@console.get("/deliveries", **access("read"))
async def deliveries(request: Request, conn: Conn, svc: Svc, q: str = "") -> Response:
    found = await console_data.search(conn, q, svc.policy.limits.subaddress_separators)
    if found.exact is not None:
        return RedirectResponse(f"/console/deliveries/{found.exact}", status_code=303)
    return _html(search_page(found, _viewer(request)))


@console.get("/deliveries/{verification_id}", **access("read"))
async def delivery(
    request: Request, conn: Conn, verification_id: str, notice: str = ""
) -> Response:
    viewer = _viewer(request)
    found = await _delivery(conn, verification_id)
    if found is None:
        return _html(missing_delivery_page(viewer), 404)
    said, hooks = await webhook_data.of_verification(conn, found.id)
    page = delivery_page(
        found, viewer, _trace_url(request), NOTICES.get(notice), events=said, hooks=hooks
    )
    return _html(page)


@console.post("/deliveries/{verification_id}/resend", **access("admin"))
async def resend(request: Request, conn: Conn, svc: Svc, verification_id: str) -> Response:
    viewer = _viewer(request)
    principal = principal_of(request.scope)
    assert principal is not None  # the route's access saw to it
    parsed = _uuid(verification_id)
    result = None
    if parsed is not None:
        result = await console_data.resend(conn, parsed, svc.policy, principal.key_id)
    if parsed is None or result is None:
        return _html(missing_delivery_page(viewer), 404)
    if result.outcome in ("resent", "already_resent"):
        notice = result.outcome.replace("_", "-")
        target = f"/console/deliveries/{result.verification_id}?notice={notice}"
        return RedirectResponse(target, status_code=303)
    found = await console_data.delivery(conn, parsed)
    assert found is not None  # resend just read it
    status, problem = _refusal(result)
    return _html(delivery_page(found, viewer, _trace_url(request), problem=problem), status)


@console.get("/suppressions", **access("read"))
async def suppressions_listed(
    request: Request, conn: Conn, svc: Svc, q: str = "", notice: str = ""
) -> Response:
    checked = None
    if q.strip():
        separators = svc.policy.limits.subaddress_separators
        checked = await console_data.search_suppression(conn, q, separators)
    shown, total = await console_data.suppressions_listed(conn)
    page = suppressions_page(shown, total, _viewer(request), checked, NOTICES.get(notice))
    return _html(page)


@console.post("/suppressions/clear", **access("admin"))
async def clear_suppression(
    request: Request,
    conn: Conn,
    svc: Svc,
    address: Annotated[str, Form(max_length=_MAX_ADDRESS_CHARS)] = "",
) -> Response:
    separators = svc.policy.limits.subaddress_separators
    try:
        cleared = await suppressions.clear(conn, address, separators)
    except InvalidRequest:
        checked = console_data.Search(address, problem="That is not an email address.")
        shown, total = await console_data.suppressions_listed(conn)
        return _html(suppressions_page(shown, total, _viewer(request), checked), 422)
    notice = "cleared" if cleared is not None else "not-suppressed"
    return RedirectResponse(f"/console/suppressions?notice={notice}", status_code=303)


@console.get("/webhooks", **access("read"))
async def webhooks_listed(request: Request, conn: Conn, notice: str = "") -> Response:
    found = await webhook_data.endpoints(conn)
    return _html(webhooks_page(found, _viewer(request), NOTICES.get(notice)))


@console.get("/webhooks/{endpoint_id}", **access("read"))
async def webhook_endpoint(
    request: Request, conn: Conn, endpoint_id: str, notice: str = ""
) -> Response:
    viewer = _viewer(request)
    parsed = _uuid(endpoint_id)
    view = None if parsed is None else await webhook_data.endpoint(conn, parsed)
    if view is None:
        return _html(missing_endpoint_page(viewer), 404)
    return _html(endpoint_page(view, viewer, NOTICES.get(notice)))


@console.post("/webhooks/deliveries/{delivery_id}/replay", **access("admin"))
async def webhook_replay(request: Request, conn: Conn, delivery_id: str) -> Response:
    viewer = _viewer(request)
    row = None
    if delivery_id.isascii() and delivery_id.isdigit() and len(delivery_id) <= 18:
        row = await conn.fetchrow(sql("webhook_delivery_endpoint"), int(delivery_id))
    if row is None:
        return _html(missing_endpoint_page(viewer), 404)
    if not await webhooks.replay(conn, int(delivery_id)):
        view = await webhook_data.endpoint(conn, row["endpoint_id"])
        assert view is not None
        problem = "That delivery is not dead (it was delivered, or replayed already)."
        return _html(endpoint_page(view, viewer, problem=problem), 409)
    target = f"/console/webhooks/{row['endpoint_id']}?notice=replayed"
    return RedirectResponse(target, status_code=303)


@console.get("/static/console.css", **access("read"))
async def stylesheet() -> Response:
    headers = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    return Response(_stylesheet(), 200, headers, "text/css; charset=utf-8")


@home.get("/", **access("read"))
async def front_door() -> Response:
    return RedirectResponse("/console", status_code=303)


def _trace_url(request: Request) -> str | None:
    found: str | None = getattr(request.app.state, TRACE_URL_STATE, None)
    return found


def _viewer(request: Request) -> Viewer:
    principal = principal_of(request.scope)
    assert principal is not None  # every console route declares a scope
    inbox = bool(getattr(request.app.state, DEV_INBOX, False))
    return Viewer(principal.name, principal.may("admin"), csrf_token_of(request), inbox)


def _html(page: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(page, status, PAGE_HEADERS)


def _uuid(raw: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


async def _delivery(conn: Conn, raw_id: str) -> console_data.Delivery | None:
    parsed = _uuid(raw_id)
    return None if parsed is None else await console_data.delivery(conn, parsed)


def _refusal(result: Resend) -> tuple[int, Markup]:
    """The status and the reason (markup from templates/console/refusal.html) a resend sent
    nothing."""
    refusal = result.refusal
    status = 429 if isinstance(refusal, Throttled) else 409
    reason = render(
        "console/refusal.html",
        outcome=result.outcome,
        newer=result.verification_id,
        reason=str(refusal) if refusal is not None else "the request was refused",
        suppressed=isinstance(refusal, Suppressed),
    )
    return status, Markup(reason)


@cache
def _stylesheet() -> bytes:
    files = resources.files("notifier").joinpath("static")
    return b"\n".join(files.joinpath(name).read_bytes() for name in _STYLESHEETS)
