"""The delivery console's HTML: queue health, delivery search, one delivery's timeline, and
suppressions. Every value is escaped here; addresses arrive redacted (console_data).

Plain HTML and one stylesheet served by the package (the dev inbox's, plus the console's
own rules): no script, no CDN, no build step. Forms that change something carry the
session's CSRF token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

from notifier.access import CSRF_FIELD
from notifier.api_models import Attempt
from notifier.charts import Bar, stacked_bars
from notifier.console_data import (
    CHART_MINUTES,
    Delivery,
    Found,
    Minute,
    QueueSnapshot,
    Search,
)
from notifier.redact import redact_email
from notifier.suppressions import Suppression

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
    "permanent": "bad",
    "transient": "warn",
    "unknown": "warn",
    "lease_expired": "warn",
    "lease_lost": "warn",
    "pending": "info",
    "sending": "info",
}


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking: the key's name, whether it may change things (the admin scope), and
    the CSRF token its forms carry ("" for a bearer key, which needs none)."""

    name: str
    admin: bool
    csrf: str


def _page(title: str, main: str, viewer: Viewer, current: str) -> str:
    links = "".join(
        f'<a href="{href}"{" aria-current=page" if href == current else ""}>{label}</a>'
        for href, label in NAV
    )
    sign_out = (
        '<form class=sign-out method=post action="/sign-out">'
        f"{_csrf(viewer)}<button type=submit class=quiet>Sign out</button></form>"
        if viewer.csrf
        else ""
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        '<meta name=color-scheme content="light dark">'
        f"<title>{escape(title)} · notifier console</title>"
        f'<link rel=stylesheet href="{STYLESHEET}"></head><body>'
        '<a class=skip href="#main">Skip to content</a>'
        '<header class=top><nav aria-label="Console">'
        f'<a class=brand href="/">notifier <span>console</span></a>{links}'
        f"<span class=session><span>Signed in as <strong>{escape(viewer.name)}</strong></span>"
        f"{sign_out}</span></nav></header>"
        f"<main id=main>{main}</main></body></html>"
    )


def _csrf(viewer: Viewer) -> str:
    return f'<input type=hidden name="{CSRF_FIELD}" value="{escape(viewer.csrf)}">'


def _when(moment: datetime | None, empty: str = "—") -> str:
    if moment is None:
        return escape(empty)
    utc = moment.astimezone(UTC)
    return f'<time datetime="{utc.isoformat()}">{utc:%Y-%m-%d %H:%M:%S} UTC</time>'


def _badge(word: str) -> str:
    tone = _TONE.get(word, "plain")
    return f"<span class='status {tone}'>{escape(word.replace('_', ' '))}</span>"


def _plural(count: int, word: str, many: str | None = None) -> str:
    return f"{count} {word if count == 1 else many or word + 's'}"


def _notice(text: str | None, problem: str | None) -> str:
    shown = ""
    if text:
        shown += f"<p class=notice role=status>{escape(text)}</p>"
    if problem:
        shown += f"<p class=problem role=alert>{problem}</p>"
    return shown


# -- queue health ---------------------------------------------------------------------------


def queue_page(snapshot: QueueSnapshot, viewer: Viewer, now: datetime) -> str:
    """The queue now (pending, sending, oldest pending, expired leases), deliveries finished
    per minute over the last hour, and how claims found their rows."""
    return _page(
        "Queue health",
        "<div class=heading><h1>Queue health</h1>"
        f"<p class=count>As of {_when(now)} · "
        '<a href="/console">Refresh</a></p></div>'
        + _tiles(snapshot)
        + "<h2>Deliveries finished, per minute</h2>"
        + _chart(snapshot.minutes)
        + "<div class=columns>"
        + _shares(snapshot)
        + _outcomes(snapshot.outcomes)
        + "</div>",
        viewer,
        "/console",
    )


def _rate(count: int, minutes: int) -> str:
    """Deliveries a minute, with the precision the number needs (0.03, 2.5, 120)."""
    rate = count / minutes
    if not count:
        return "none"
    return f"{rate:.0f}" if rate >= 10 else f"{rate:.1f}" if rate >= 1 else f"{rate:.2f}"


def _tiles(s: QueueSnapshot) -> str:
    recent = s.minutes[-5:]
    recent_sent = sum(m.sent for m in recent)
    tiles = [
        ("Pending", str(s.pending), f"{s.pending_due} due now", ""),
        ("Sending", str(s.sending), "held under a lease", ""),
        (
            "Oldest pending",
            f"{s.oldest_pending_seconds:.1f} s",
            "waiting past its due time",
            " warn" if s.oldest_pending_seconds >= 60 else "",
        ),
        (
            "Expired leases",
            str(s.expired_leases),
            "rows a vanished worker held",
            " warn" if s.expired_leases else "",
        ),
        (
            "Sent, last hour",
            str(s.sent),
            f"{_rate(s.sent, CHART_MINUTES)} a minute; "
            f"{_rate(recent_sent, len(recent) or 1)} in the last {len(recent)} min",
            "",
        ),
        ("Failed, last hour", str(s.failed), f"{_rate(s.failed, CHART_MINUTES)} a minute", ""),
    ]
    return (
        '<dl class=tiles aria-label="The queue now">'
        + "".join(
            f"<div class='tile{tone}'><dt>{label}</dt><dd class=figure>{escape(figure)}</dd>"
            f"<dd class=note>{escape(note)}</dd></div>"
            for label, figure, note, tone in tiles
        )
        + "</dl>"
    )


def _chart(minutes: Sequence[Minute]) -> str:
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


def _shares(s: QueueSnapshot) -> str:
    rows = "".join(
        f"<tr><th scope=row>{escape(name)}<span class=why>{escape(DISCOVERY.get(name, ''))}"
        f"</span></th><td>{count}</td><td><span class=share>{_share_bar(share)}"
        f"{share:.0%}</span></td></tr>"
        for name, count, share in s.shares()
    )
    body = rows or "<tr><td colspan=3>No claims in the last hour.</td></tr>"
    return (
        "<section><h2>How claims found their rows</h2>"
        "<p class=hint>Last hour. A NOTIFY should find nearly every new row; a large sweep "
        "share means notifications are lost (is LISTEN behind a transaction pooler?).</p>"
        "<div class=table-wrap><table class=figures><thead><tr><th scope=col>Found by</th>"
        f"<th scope=col>Claims</th><th scope=col>Share</th></tr></thead><tbody>{body}</tbody>"
        "</table></div></section>"
    )


def _share_bar(share: float) -> str:
    return (
        '<svg class=share-bar viewBox="0 0 100 10" preserveAspectRatio=none aria-hidden=true>'
        '<rect class=track width="100" height="10"/>'
        f'<rect class=fill width="{share * 100:.1f}" height="10"/></svg>'
    )


def _outcomes(outcomes: dict[str, int]) -> str:
    rows = "".join(
        f"<tr><th scope=row>{_badge(name)}</th><td>{count}</td></tr>"
        for name, count in sorted(outcomes.items(), key=lambda item: (-item[1], item[0]))
    )
    body = rows or "<tr><td colspan=2>No attempts in the last hour.</td></tr>"
    return (
        "<section><h2>Attempts by outcome</h2>"
        "<p class=hint>Last hour, every attempt (a retried delivery has several).</p>"
        "<div class=table-wrap><table class=figures><thead><tr><th scope=col>Outcome</th>"
        f"<th scope=col>Attempts</th></tr></thead><tbody>{body}</tbody></table></div></section>"
    )


# -- delivery search --------------------------------------------------------------------------


def _search_form(action: str, label: str, query: str, hint: str) -> str:
    return (
        f'<form class=search role=search method=get action="{action}">'
        f"<label for=q>{escape(label)}</label>"
        f'<span class=field><input id=q name=q type=search value="{escape(query)}" '
        "autocomplete=off spellcheck=false aria-describedby=q-hint>"
        "<button type=submit>Search</button></span>"
        f"<span class=hint id=q-hint>{escape(hint)}</span></form>"
    )


def search_page(found: Search, viewer: Viewer) -> str:
    """The search form and what it found: deliveries to a mailbox, newest first."""
    form = _search_form(
        "/console/deliveries",
        "Email address or verification id",
        found.query,
        "Any spelling of the address finds its mailbox (case and +tags do not matter). "
        "Addresses are shown redacted.",
    )
    results = ""
    if found.problem:
        results = f"<p class=problem role=alert>{escape(found.problem)}</p>"
    elif found.query:
        results = _suppressed_banner(found.suppression, found.query, viewer) + _results(found.found)
    return _page(
        "Deliveries",
        "<h1>Deliveries</h1>" + form + results,
        viewer,
        "/console/deliveries",
    )


def _results(found: Sequence[Found]) -> str:
    if not found:
        return "<p class=empty>No delivery to that mailbox is on record.</p>"
    items = "".join(
        f'<li><a class=delivery href="/console/deliveries/{f.id}">'
        f"<span class=address>{escape(f.address)}</span>{_badge(f.status)}"
        f"<span class=purpose>{escape(f.purpose)}"
        f"{' · verified' if f.verified else ''}{' · superseded' if f.superseded else ''}</span>"
        f"<span class=when>{_when(f.created_at)}</span>"
        f"<span class=attempts>{_plural(f.attempts, 'attempt')}</span></a></li>"
        for f in found
    )
    return (
        f"<p class=count>{_plural(len(found), 'delivery', 'deliveries')} "
        "to this mailbox, newest first</p>"
        f'<ol class=deliveries aria-label="Deliveries, newest first">{items}</ol>'
    )


def _suppressed_banner(suppression: Suppression | None, address: str, viewer: Viewer) -> str:
    if suppression is None:
        return ""
    return (
        "<div class=banner role=status><p><strong>This address is suppressed</strong> since "
        f"{_when(suppression.suppressed_at)}: {escape(suppression.reason)}. "
        "No mail goes to it until the suppression expires "
        f"({_when(suppression.expires_at, 'never')}) or is cleared.</p>"
        f"{_clear_form(address, viewer)}</div>"
    )


def _clear_form(address: str, viewer: Viewer) -> str:
    if not viewer.admin:
        return "<p class=hint>Clearing it needs a key with the admin scope.</p>"
    return (
        '<form method=post action="/console/suppressions/clear">'
        f'{_csrf(viewer)}<input type=hidden name=address value="{escape(address)}">'
        "<button type=submit class=danger>Clear the suppression</button></form>"
    )


# -- one delivery -----------------------------------------------------------------------------


def delivery_page(
    d: Delivery,
    viewer: Viewer,
    trace_url: str | None,
    notice: str | None = None,
    problem: str | None = None,
) -> str:
    """One delivery: its state, its trace, Resend when it failed, and its attempts."""
    return _page(
        f"Delivery to {d.address}",
        '<p class=back><a href="/console/deliveries">← Deliveries</a></p>'
        f"<div class=heading><h1>Delivery to {escape(d.address)}</h1>{_badge(d.status)}</div>"
        + _notice(notice, problem)
        + _facts(d, trace_url)
        + _resend(d, viewer)
        + f"<h2 id=attempts>Attempts <span class=count>({len(d.timeline)})</span></h2>"
        + _timeline(d.timeline),
        viewer,
        "/console/deliveries",
    )


def _facts(d: Delivery, trace_url: str | None) -> str:
    facts = [
        ("Verification id", f"<code>{d.id}</code>"),
        ("Purpose", escape(d.purpose)),
        ("Requested", _when(d.created_at)),
        ("Requested by", _client(d.client_id)),
        ("Link expires", _when(d.expires_at)),
        ("Verified", _when(d.verified_at, "not yet")),
        ("Attempts", f"{d.attempts} of at most {d.max_attempts}"),
    ]
    if d.unknown_outcomes:
        facts.append(("Unknown outcomes", f"{d.unknown_outcomes} (a duplicate is possible)"))
    if d.next_attempt_at is not None:
        facts.append(("Next attempt", _when(d.next_attempt_at)))
    facts.append(("Finished", _when(d.completed_at, "not yet")))
    if d.last_outcome:
        facts.append(("Last outcome", _badge(d.last_outcome)))
    if d.last_error:
        facts.append(("Last error", escape(d.last_error)))
    if d.superseded_at is not None:
        facts.append(("Superseded", _superseded(d)))
    if d.scrubbed:
        facts.append(("Address", "scrubbed after its retention period"))
    facts.append(("Message-ID", f"<code>{escape(d.message_id)}</code>"))
    facts.append(("Trace", _trace(d.trace_id, trace_url)))
    rows = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in facts)
    return f"<dl class=meta>{rows}</dl>"


def _client(client_id: str | None) -> str:
    if client_id is None:
        return "the application's own code (library call)"
    return f"API key <code>{escape(client_id)}</code>"


def _superseded(d: Delivery) -> str:
    when = _when(d.superseded_at)
    if d.superseded_by is None:
        return f"{when} by a newer request"
    return f'{when} by <a href="/console/deliveries/{d.superseded_by}">a newer delivery</a>'


def _trace(trace_id: str | None, trace_url: str | None) -> str:
    if trace_id is None:
        return "none recorded (telemetry was off when it was requested)"
    if trace_url is None:
        return f"<code>{trace_id}</code>"
    # trace_id is 32 hex digits (console_data.trace_id): nothing in it needs quoting.
    href = trace_url.replace("{trace_id}", trace_id)
    return f'<a href="{escape(href)}" rel=noreferrer><code>{trace_id}</code></a>'


def _resend(d: Delivery, viewer: Viewer) -> str:
    if not d.resendable:
        return ""
    if d.suppression is not None:
        return (
            "<div class=banner role=status><p><strong>Its address is suppressed</strong> since "
            f"{_when(d.suppression.suppressed_at)}: {escape(d.suppression.reason)}. No new "
            "link can be sent until the suppression is cleared: search for the address the "
            'person gives you under <a href="/console/suppressions">Suppressions</a> and '
            "clear it there.</p></div>"
        )
    if not viewer.admin:
        return (
            "<p class=hint>This delivery failed. Sending a new link needs a key with the "
            "admin scope.</p>"
        )
    return (
        "<section class=banner aria-labelledby=resend-title>"
        "<h2 id=resend-title>Send a new link</h2>"
        "<p>A new verification for the same user, address and purpose, requested like any "
        "other: limits and suppressions apply, and pressing twice sends one.</p>"
        f'<form method=post action="/console/deliveries/{d.id}/resend">{_csrf(viewer)}'
        "<button type=submit>Resend</button></form></section>"
    )


def _timeline(attempts: Sequence[Attempt]) -> str:
    if not attempts:
        return "<p class=empty>No attempt yet.</p>"
    return (
        '<ol class=timeline aria-label="Attempts, oldest first">'
        + "".join(_attempt(a) for a in attempts)
        + "</ol>"
    )


def _attempt(a: Attempt) -> str:
    reply = _reply(a.smtp_code, a.detail)
    duration = "—" if a.duration_ms is None else f"{a.duration_ms:,.0f} ms"
    facts = [
        ("Claimed by", f"<code>{escape(a.claimed_by)}</code>"),
        ("Found by", escape(a.discovered_by or "not recorded")),
        ("Claimed", _when(a.claimed_at)),
        ("Finished", _when(a.finished_at)),
        ("Took", duration),
        ("Server reply", escape(reply) if reply else "—"),
        ("Body sent", "yes" if a.body_sent else "no"),
        ("Lease held", "yes" if a.lease_held else "no: another worker had the row"),
    ]
    rows = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in facts)
    return (
        f"<li class=attempt><h3>Attempt {a.attempt} {_badge(a.outcome)}</h3>"
        f"<dl class=meta>{rows}</dl></li>"
    )


def _reply(code: int | None, detail: str | None) -> str:
    """What the mail server said: its code, once (a stored reply usually starts with it)."""
    if code is None or (detail or "").startswith(str(code)):
        return detail or ""
    return f"{code} {detail or ''}".strip()


def missing_delivery_page(viewer: Viewer) -> str:
    return _page(
        "No such delivery",
        '<p class=back><a href="/console/deliveries">← Deliveries</a></p>'
        "<h1>No such delivery</h1><p>No verification has that id. It may have been deleted "
        "after its retention period.</p>",
        viewer,
        "/console/deliveries",
    )


# -- suppressions -----------------------------------------------------------------------------


def suppressions_page(
    listed: Sequence[Suppression],
    total: int,
    viewer: Viewer,
    checked: Search | None = None,
    notice: str | None = None,
) -> str:
    """Suppressions in force (redacted), and a check of one address with Clear."""
    form = _search_form(
        "/console/suppressions",
        "Check an address",
        checked.query if checked else "",
        "Type the whole address the person gives you (its case does not matter).",
    )
    return _page(
        "Suppressions",
        "<h1>Suppressions</h1>"
        "<p class=lead>Addresses whose own mail server refused them for good (unknown, "
        "disabled, full). No mail goes to them until the suppression expires or is cleared; "
        "requests for them are refused.</p>"
        + _notice(notice, None)
        + form
        + (_check(checked, viewer) if checked and checked.query else "")
        + f"<h2>In force now <span class=count>({total})</span></h2>"
        + _suppression_list(listed, total),
        viewer,
        "/console/suppressions",
    )


def _check(checked: Search, viewer: Viewer) -> str:
    if checked.problem:
        return f"<p class=problem role=alert>{escape(checked.problem)}</p>"
    if checked.suppression is None:
        return "<p class=notice role=status>That address is not suppressed.</p>"
    return _suppressed_banner(checked.suppression, checked.query, viewer)


def _suppression_list(listed: Sequence[Suppression], total: int) -> str:
    if not listed:
        return "<p class=empty>No address is suppressed.</p>"
    items = "".join(
        f"<li class=suppression><span class=address>{escape(redact_email(s.address))}</span>"
        f"<span class=reason>{escape(s.reason)}</span>"
        f"<span class=when>since {_when(s.suppressed_at)}</span>"
        f"<span class=when>until {_when(s.expires_at, 'cleared')}</span></li>"
        for s in listed
    )
    more = (
        f"<p class=hint>The newest {len(listed)} of {total}; check any other by its address.</p>"
        if total > len(listed)
        else ""
    )
    return (
        f'<ol class=suppressions aria-label="Suppressed addresses, newest first">{items}</ol>{more}'
    )
