"""The delivery console's pages: queue health, delivery search, one delivery's timeline, and
suppressions, rendered from templates/console/ (every value escaped by the templates);
addresses arrive redacted (console_data).

Plain HTML and one stylesheet served by the package (the dev inbox's, plus the console's
own rules): no script, no CDN, no build step. Forms that change something carry the
session's CSRF token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup

from notifier.redact import redact_email
from notifier.storage.event_feed import Event
from notifier.storage.suppressions import Suppression
from notifier.storage.webhooks import Endpoint
from notifier.web.access import CSRF_FIELD
from notifier.web.console.charts import Bar, stacked_bars
from notifier.web.console.data import (
    CHART_MINUTES,
    Delivery,
    Minute,
    QueueSnapshot,
    Search,
)
from notifier.web.console.webhook_data import EndpointView, WebhookDelivery, shown_url
from notifier.web.templating import render

STYLESHEET = "/console/static/console.css"
# No script at all; styles only from this origin; forms post only here; never framed.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
NAV = (
    ("/console", "Queue"),
    ("/console/deliveries", "Deliveries"),
    ("/console/suppressions", "Suppressions"),
    ("/console/webhooks", "Webhooks"),
    ("/docs", "API docs"),
)
# How each way of finding a row reads, for the shares table.
DISCOVERY = {
    "notify": "a NOTIFY woke a worker",
    "sweep": "the fallback sweep (a missed NOTIFY)",
    "retry_timer": "a retry came due",
    "expired_lease": "reclaimed from a worker that vanished",
    "poll": "poll mode",
    "unknown": "not recorded",
}
# The badge colour of each delivery status and attempt outcome.
_TONE = {
    "sent": "ok",
    "verified": "ok",
    "failed": "bad",
    "bounced": "bad",
    "complained": "bad",
    "permanent": "bad",
    "transient": "warn",
    "unknown": "warn",
    "lease_expired": "warn",
    "lease_lost": "warn",
    "pending": "info",
    "sending": "info",
    "delivered": "ok",
    "healthy": "ok",
    "dead": "bad",
    "disabled": "bad",
    "gone": "bad",
    "refused": "bad",
    "failing": "warn",
    "throttled": "warn",
}


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking: the key's name, whether it may change things (the admin scope), the
    CSRF token its forms carry ("" for a bearer key, which needs none), and whether notifier
    dev's inbox is beside the console (then the pages link to it)."""

    name: str
    admin: bool
    csrf: str
    inbox: bool = False


def _render(template: str, viewer: Viewer, current: str, **values: object) -> str:
    return render(
        template,
        viewer=viewer,
        current=current,
        nav=NAV,
        stylesheet=STYLESHEET,
        csrf_field=CSRF_FIELD,
        tones=_TONE,
        shown_url=shown_url,
        **values,
    )


# -- queue health ---------------------------------------------------------------------------


def queue_page(snapshot: QueueSnapshot, viewer: Viewer, now: datetime) -> str:
    """The queue now (pending, sending, oldest pending, expired leases), deliveries finished
    per minute over the last hour, and how claims found their rows."""
    return _render(
        "console/queue.html",
        viewer,
        "/console",
        now=now,
        tiles=_tiles(snapshot),
        chart=_chart(snapshot.minutes),
        shares=snapshot.shares(),
        discovery=DISCOVERY,
        outcomes=sorted(snapshot.outcomes.items(), key=lambda item: (-item[1], item[0])),
    )


def _rate(count: int, minutes: int) -> str:
    """Deliveries a minute, with the precision the number needs (0.03, 2.5, 120)."""
    rate = count / minutes
    if not count:
        return "0"
    return f"{rate:.0f}" if rate >= 10 else f"{rate:.1f}" if rate >= 1 else f"{rate:.2f}"


@dataclass(frozen=True, slots=True)
class _Tile:
    label: str
    figure: str
    note: str
    tone: str = ""


def _tiles(s: QueueSnapshot) -> list[_Tile]:
    recent = s.minutes[-5:]
    recent_sent = sum(m.sent for m in recent)
    return [
        _Tile("Pending", str(s.pending), f"{s.pending_due} due now"),
        _Tile("Sending", str(s.sending), "held under a lease"),
        _Tile(
            "Oldest pending",
            f"{s.oldest_pending_seconds:.1f} s"
            if s.pending_due
            else "None due yet"
            if s.pending
            else "Nothing pending",
            "waiting past its due time" if s.pending_due else "no row is due",
            " warn" if s.oldest_pending_seconds >= 60 else "",
        ),
        _Tile(
            "Expired leases",
            str(s.expired_leases),
            "rows a vanished worker held",
            " warn" if s.expired_leases else "",
        ),
        _Tile(
            "Sent, last hour",
            str(s.sent),
            f"{_rate(s.sent, CHART_MINUTES)} a minute; "
            f"{_rate(recent_sent, len(recent) or 1)} in the last {len(recent)} min",
        ),
        _Tile("Failed, last hour", str(s.failed), f"{_rate(s.failed, CHART_MINUTES)} a minute"),
        *_send_rate_tile(s),
    ]


def _send_rate_tile(s: QueueSnapshot) -> list[_Tile]:
    """The fleet's send rate in force, once NOTIFIER_SEND_RATE has been used, and a pause for
    the provider's spent daily quota while one holds."""
    if s.paused_until is not None:
        return [
            _Tile(
                "Sending paused",
                f"until {s.paused_until:%H:%M} UTC",
                "the provider's daily quota is spent; nothing is claimed until it rolls over",
                " warn",
            )
        ]
    if s.send_rate is None:
        return []
    if s.backed_off_at is None:
        return [_Tile("Send rate", f"{s.send_rate:g}/s", "in force across every worker")]
    return [
        _Tile(
            "Send rate",
            f"{s.send_rate:.1f}/s",
            f"in force; the provider last throttled at {s.backed_off_at:%H:%M:%S} UTC",
            " warn",
        )
    ]


def _chart(minutes: Sequence[Minute]) -> Markup:
    sent = sum(m.sent for m in minutes)
    failed = sum(m.failed for m in minutes)
    busiest = max((m.sent + m.failed for m in minutes), default=0)
    description = (
        f"Over the last {len(minutes)} minutes: {sent} sent, {failed} failed; "
        f"the busiest minute finished {busiest}."
    )
    bars = [
        Bar(
            f"{m.start.astimezone(UTC):%H:%M} UTC: {m.sent} sent, {m.failed} failed",
            (m.sent, m.failed),
        )
        for m in minutes
    ]
    first = f"{minutes[0].start.astimezone(UTC):%H:%M}" if minutes else ""
    middle = f"{minutes[len(minutes) // 2].start.astimezone(UTC):%H:%M}" if minutes else ""
    return stacked_bars(
        bars, (("sent", "Sent"), ("failed", "Failed")), description, (first, middle, "now (UTC)")
    )


# -- delivery search --------------------------------------------------------------------------


def search_page(found: Search, viewer: Viewer) -> str:
    """The search form and what it found: deliveries to a mailbox, newest first."""
    return _render("console/search.html", viewer, "/console/deliveries", found=found)


# -- one delivery -----------------------------------------------------------------------------


def delivery_page(
    d: Delivery,
    viewer: Viewer,
    trace_url: str | None,
    notice: str | None = None,
    problem: Markup | None = None,
    events: Sequence[Event] = (),
    hooks: Sequence[WebhookDelivery] = (),
) -> str:
    """One delivery: its state, its trace, Resend when it failed, its attempts, its
    verification's events with their webhook deliveries, and (beside notifier dev's inbox)
    its message there. `problem`: why a resend was refused, as markup its maker built from
    escaped parts."""
    return _render(
        "console/delivery.html",
        viewer,
        "/console/deliveries",
        d=d,
        trace_url=trace_url,
        notice=notice,
        problem=problem,
        server_reply=_reply,
        events=events,
        hooks=hooks,
    )


def _reply(code: int | None, detail: str | None) -> str:
    """What the mail server said: its code, once (a stored reply usually starts with it)."""
    if code is None or (detail or "").startswith(str(code)):
        return detail or ""
    return f"{code} {detail or ''}".strip()


def missing_delivery_page(viewer: Viewer) -> str:
    return _render("console/missing_delivery.html", viewer, "/console/deliveries")


# -- suppressions -----------------------------------------------------------------------------


def suppressions_page(
    listed: Sequence[Suppression],
    total: int,
    viewer: Viewer,
    checked: Search | None = None,
    notice: str | None = None,
) -> str:
    """Suppressions in force (redacted), and a check of one address with Clear."""
    return _render(
        "console/suppressions.html",
        viewer,
        "/console/suppressions",
        listed=listed,
        total=total,
        checked=checked,
        notice=notice,
        redact_email=redact_email,
    )


# -- webhooks -----------------------------------------------------------------------------------


def webhooks_page(endpoints: Sequence[Endpoint], viewer: Viewer, notice: str | None = None) -> str:
    """Every webhook endpoint with its health and its deliveries waiting and dead."""
    return _render(
        "console/webhooks.html", viewer, "/console/webhooks", endpoints=endpoints, notice=notice
    )


def endpoint_page(
    view: EndpointView, viewer: Viewer, notice: str | None = None, problem: str | None = None
) -> str:
    """One endpoint: its health, secret and latest deliveries with their attempts, and
    Replay for the dead ones."""
    return _render(
        "console/endpoint.html",
        viewer,
        "/console/webhooks",
        view=view,
        notice=notice,
        problem=problem,
    )


def missing_endpoint_page(viewer: Viewer) -> str:
    return _render("console/missing_endpoint.html", viewer, "/console/webhooks")
