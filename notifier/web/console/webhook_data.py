"""What the console shows of events and webhooks: the endpoints with their health, an
endpoint's recent deliveries with their attempts, and a verification's events and the
deliveries of them. Receivers' answers arrive cut short (notifier.delivery.webhooks.sender)
and are escaped by the templates; bodies are never kept whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from notifier.event_types import event_id
from notifier.storage import event_feed, webhooks
from notifier.storage.connection import Runner
from notifier.storage.event_feed import Event
from notifier.storage.webhooks import Endpoint

# The most deliveries an endpoint's page lists, newest first.
DELIVERIES_LISTED = 50


@dataclass(frozen=True, slots=True)
class WebhookAttempt:
    attempt: int
    outcome: str
    status_code: int | None
    detail: str | None
    duration_ms: float | None
    lease_owner: str
    lease_held: bool
    at: datetime


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    id: int
    status: str
    attempts: int
    unknown_outcomes: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    completed_at: datetime | None
    event_id: str
    event_type: str
    # The verification its event is about (an endpoint's page links to it), and the
    # endpoint it goes to (a verification's page names it).
    verification_id: uuid.UUID | None
    endpoint_id: uuid.UUID | None
    url: str | None
    timeline: Sequence[WebhookAttempt]


@dataclass(frozen=True, slots=True)
class EndpointView:
    endpoint: Endpoint
    deliveries: Sequence[WebhookDelivery]


async def endpoints(conn: Runner) -> list[Endpoint]:
    return await webhooks.listing(conn)


async def endpoint(conn: Runner, endpoint_id: uuid.UUID) -> EndpointView | None:
    found = next((e for e in await webhooks.listing(conn) if e.id == endpoint_id), None)
    if found is None:
        return None
    rows = await webhooks.deliveries_of_endpoint(conn, endpoint_id, DELIVERIES_LISTED)
    return EndpointView(found, await _with_attempts(conn, rows))


async def of_verification(
    conn: Runner, verification_id: uuid.UUID
) -> tuple[list[Event], list[WebhookDelivery]]:
    """A verification's events, oldest first, and the webhook deliveries of them."""
    found = await event_feed.events_of_verification(conn, verification_id)
    rows = await webhooks.deliveries_of_verification(conn, verification_id)
    return found, await _with_attempts(conn, rows)


async def _with_attempts(conn: Runner, rows: Sequence[Any]) -> list[WebhookDelivery]:
    attempts = await webhooks.attempts_of(conn, [r["id"] for r in rows])
    return [
        WebhookDelivery(
            id=r["id"],
            status=r["status"],
            attempts=r["attempts"],
            unknown_outcomes=r["unknown_outcomes"],
            next_attempt_at=r["next_attempt_at"] if r["status"] == "pending" else None,
            last_status_code=r["last_status_code"],
            last_error=r["last_error"],
            created_at=r["created_at"],
            completed_at=r["completed_at"],
            event_id=event_id(r["event_uid"]),
            event_type=r["event_type"],
            verification_id=r.get("verification_id"),
            endpoint_id=r.get("endpoint_id"),
            url=r.get("url"),
            timeline=[
                WebhookAttempt(
                    a["attempt"],
                    a["outcome"],
                    a["status_code"],
                    a["detail"],
                    a["duration_ms"],
                    a["lease_owner"],
                    a["lease_held"],
                    a["created_at"],
                )
                for a in attempts[r["id"]]
            ],
        )
        for r in rows
    ]


def shown_url(url: str | None, admin: bool) -> str:
    """An endpoint's URL as a viewer may see it: whole to an admin key (it may change the
    endpoint anyway, and /v1/webhooks shows it whole); to a read key only its origin, since
    webhook URLs often carry a credential in their path or query."""
    if url is None:
        return "(removed)"
    if admin:
        return url
    parts = urlsplit(url)
    rest = "/…" if (parts.path not in ("", "/") or parts.query) else "/"
    return f"{parts.scheme}://{parts.netloc}{rest}"
