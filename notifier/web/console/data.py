"""What the delivery console reads and does: the queue's health over the last hour, deliveries
found by address or id with their attempt timelines, suppressions, and resending a failed
delivery. Addresses leave this module redacted; tokens are never read.

Support staff confirm a delivery by what its recipient tells them, so a search takes the
whole address and finds its canonical mailbox (every spelling and +tag of it), and the
results show the address redacted.
"""

from __future__ import annotations

import dataclasses
import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from notifier import addresses
from notifier.redact import redact_email
from notifier.storage.connection import Runner
from notifier.storage.outbox import request_standalone
from notifier.storage.queries import sql
from notifier.storage.suppressions import Suppression
from notifier.verifications import Policy, RequestError
from notifier.web.api_models import Attempt
from notifier.web.attempts import attempts_of

# The chart's span, and the window the rates and shares are counted over (minutes).
CHART_MINUTES = 60
# Most deliveries one search shows (a mailbox rarely has more in the retention period).
SEARCH_LIMIT = 50
# Most suppressions the list shows; the rest are counted, and found by address.
SUPPRESSIONS_LISTED = 100
# Longer searches are cut: an address is at most 254 characters, a uuid 36.
MAX_QUERY_CHARS = 320
# The idempotency key of a console resend names the delivery it replaces, so pressing the
# button twice (or two tabs) sends one email.
RESEND_KEY_PREFIX = "console-resend:"
# W3C traceparent: version, trace id, parent span id, flags.
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-(?P<trace>[0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


@dataclass(frozen=True, slots=True)
class Minute:
    """Deliveries that finished within one minute."""

    start: datetime
    sent: int
    failed: int


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """The queue now, and what happened over the last CHART_MINUTES."""

    pending: int
    pending_due: int
    sending: int
    expired_leases: int
    oldest_pending_seconds: float
    minutes: Sequence[Minute]
    outcomes: dict[str, int] = field(default_factory=dict)
    discovered_by: dict[str, int] = field(default_factory=dict)
    # The fleet's send rate in force (None: NOTIFIER_SEND_RATE never set), and when the
    # provider last throttled it.
    send_rate: float | None = None
    backed_off_at: datetime | None = None
    # Sends counted today against NOTIFIER_DAILY_QUOTA, and a pause for a spent quota.
    sent_today: int = 0
    paused_until: datetime | None = None

    @property
    def sent(self) -> int:
        return sum(m.sent for m in self.minutes)

    @property
    def failed(self) -> int:
        return sum(m.failed for m in self.minutes)

    def shares(self) -> list[tuple[str, int, float]]:
        """How claims found their rows: (how, claims, share of all), most first."""
        total = sum(self.discovered_by.values())
        ranked = sorted(self.discovered_by.items(), key=lambda item: (-item[1], item[0]))
        return [(name, count, count / total) for name, count in ranked if total]


async def queue_snapshot(conn: Runner) -> QueueSnapshot:
    queue = await conn.fetchrow(sql("queue_health"))
    minutes = [
        Minute(r["minute"], r["sent"], r["failed"])
        for r in await conn.fetch(sql("console_series"), CHART_MINUTES)
    ]
    snapshot = QueueSnapshot(
        pending=queue["pending"],
        pending_due=queue["pending_due"],
        sending=queue["sending"],
        expired_leases=queue["expired_leases"],
        oldest_pending_seconds=float(queue["oldest_pending_seconds"] or 0.0),
        minutes=minutes,
    )
    rate = await conn.fetchrow(sql("send_rate_in_force"))
    if rate is not None:
        snapshot = dataclasses.replace(
            snapshot,
            send_rate=None if math.isinf(rate["rate"]) else rate["rate"],
            backed_off_at=rate["backed_off_at"],
            sent_today=rate["sent_today"] if rate["day"] == datetime.now(UTC).date() else 0,
            paused_until=rate["paused_until"]
            if rate["paused_until"] is not None and rate["paused_until"] > datetime.now(UTC)
            else None,
        )
    groups = {"outcome": snapshot.outcomes, "discovered_by": snapshot.discovered_by}
    for row in await conn.fetch(sql("console_attempt_counts"), CHART_MINUTES * 60.0):
        groups[row["kind"]][row["name"]] = row["count"]
    return snapshot


@dataclass(frozen=True, slots=True)
class Found:
    """One delivery in a list of search results."""

    id: uuid.UUID
    address: str  # redacted
    purpose: str
    created_at: datetime
    status: str
    attempts: int
    verified: bool
    superseded: bool


@dataclass(frozen=True, slots=True)
class Search:
    """What a search found: deliveries to one mailbox, the one delivery an id names, or a
    problem with what was typed."""

    query: str
    found: Sequence[Found] = ()
    # The delivery the query's verification id names.
    exact: uuid.UUID | None = None
    # The mailbox's suppression, when searching by address.
    suppression: Suppression | None = None
    problem: str | None = None


async def search(conn: Runner, query: str, separators: str) -> Search:
    """Deliveries by verification id (exact) or by any spelling of an address."""
    query = query.strip()[:MAX_QUERY_CHARS]
    if not query:
        return Search(query)
    try:
        by_id = uuid.UUID(query)
    except ValueError:
        by_id = None
    if by_id is not None:
        if await conn.fetchrow(sql("console_delivery"), by_id) is None:
            return Search(query, problem="No delivery has that verification id.")
        return Search(query, exact=by_id)
    try:
        address = addresses.parse(query, separators)
    except addresses.InvalidAddress:
        return Search(query, problem="Type a whole email address or a verification id.")
    rows = await conn.fetch(sql("console_deliveries_by_mailbox"), address.mailbox, SEARCH_LIMIT)
    found = [
        Found(
            id=r["id"],
            address=redact_email(r["email"]),
            purpose=r["purpose"],
            created_at=r["created_at"],
            status=r["status"],
            attempts=r["attempts"],
            verified=r["verified_at"] is not None,
            superseded=r["superseded_at"] is not None,
        )
        for r in rows
    ]
    return Search(query, found=found, suppression=await suppression_of(conn, address.folded))


async def search_suppression(conn: Runner, query: str, separators: str) -> Search:
    """Whether an address (as typed, whatever its case) is suppressed."""
    query = query.strip()[:MAX_QUERY_CHARS]
    try:
        folded = addresses.parse(query, separators).folded
    except addresses.InvalidAddress:
        return Search(query, problem="Type a whole email address.")
    return Search(query, suppression=await suppression_of(conn, folded))


@dataclass(frozen=True, slots=True)
class Delivery:
    """One verification's delivery as the console shows it: the address redacted, the trace
    id from its traceparent, and what superseded it, if anything did."""

    id: uuid.UUID
    address: str
    purpose: str
    client_id: str | None
    created_at: datetime
    expires_at: datetime
    verified_at: datetime | None
    superseded_at: datetime | None
    scrubbed: bool
    status: str
    attempts: int
    max_attempts: int
    unknown_outcomes: int
    next_attempt_at: datetime | None
    completed_at: datetime | None
    last_outcome: str | None
    last_error: str | None
    message_id: str
    trace_id: str | None
    superseded_by: uuid.UUID | None
    resendable: bool
    # The address's suppression in force, looked up for a resendable delivery only.
    suppression: Suppression | None
    timeline: Sequence[Attempt]
    # What mail systems reported after the relay accepted it (bounces, complaints).
    reports: Sequence[Any] = ()
    # How it is confirmed and, with a code, its wrong codes and lock (never the code).
    method: str = "link"
    code_failures: int = 0
    code_locked_at: datetime | None = None
    code_expires_at: datetime | None = None


async def delivery(conn: Runner, verification_id: uuid.UUID) -> Delivery | None:
    row = await conn.fetchrow(sql("console_delivery"), verification_id)
    if row is None:
        return None
    later = None
    if row["superseded_at"] is not None:
        later = await conn.fetchval(sql("console_superseded_by"), verification_id)
    resendable = _resendable(row)
    # A suppression is for the address that was refused.
    suppression = await suppression_of(conn, addresses.folded(row["email"])) if resendable else None
    return Delivery(
        id=row["id"],
        address=redact_email(row["email"]),
        purpose=row["purpose"],
        client_id=row["client_id"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        verified_at=row["verified_at"],
        superseded_at=row["superseded_at"],
        scrubbed=row["scrubbed_at"] is not None,
        status=row["status"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        unknown_outcomes=row["unknown_outcomes"],
        next_attempt_at=row["next_attempt_at"] if row["status"] == "pending" else None,
        completed_at=row["completed_at"],
        last_outcome=row["last_outcome"],
        last_error=row["last_error"],
        message_id=row["message_id"],
        trace_id=trace_id(row["traceparent"]),
        superseded_by=later,
        resendable=resendable,
        suppression=suppression,
        timeline=await attempts_of(conn, verification_id),
        reports=await conn.fetch(sql("reports_of_verification"), verification_id),
        method=row["method"],
        code_failures=row["code_failures"],
        code_locked_at=row["code_locked_at"],
        code_expires_at=row["code_expires_at"],
    )


def trace_id(traceparent: str | None) -> str | None:
    """The trace id a stored traceparent names; None without one (telemetry was off)."""
    match = _TRACEPARENT.fullmatch(traceparent or "")
    if match is None or match["trace"] == "0" * 32:
        return None
    return match["trace"]


async def suppression_of(conn: Runner, folded: str) -> Suppression | None:
    row = await conn.fetchrow(sql("console_suppression"), folded)
    return None if row is None else _suppression(row)


async def suppressions_listed(conn: Runner) -> tuple[list[Suppression], int]:
    """The newest SUPPRESSIONS_LISTED suppressions in force, and how many there are."""
    rows = await conn.fetch(sql("console_suppressions"), SUPPRESSIONS_LISTED)
    return [_suppression(r) for r in rows], (rows[0]["total"] if rows else 0)


def _suppression(row: Any) -> Suppression:
    return Suppression(
        row["email"], row["reason"], row["smtp_code"], row["suppressed_at"], row["expires_at"]
    )


ResendOutcome = Literal["resent", "already_resent", "not_resendable", "superseded", "refused"]


@dataclass(frozen=True, slots=True)
class Resend:
    """What pressing Resend did: `resent` (`verification_id` is the new delivery),
    `already_resent` (an earlier press made it), or why nothing was sent."""

    outcome: ResendOutcome
    verification_id: uuid.UUID | None = None
    # Why the request was refused (a limit, a suppression), in the request's own words.
    refusal: RequestError | None = None


async def resend(
    conn: Runner, verification_id: uuid.UUID, policy: Policy, client_id: str
) -> Resend | None:
    """A new verification for a failed delivery's user, address and purpose, requested
    like any other (limits and suppressions apply) by `client_id`; None: no such delivery."""
    row = await conn.fetchrow(sql("console_delivery"), verification_id)
    if row is None:
        return None
    key = f"{RESEND_KEY_PREFIX}{verification_id}"
    earlier = await conn.fetchval(sql("console_resent"), key, client_id)
    if earlier is not None:
        return Resend("already_resent", earlier)
    if row["superseded_at"] is not None:
        later = await conn.fetchval(sql("console_superseded_by"), verification_id)
        return Resend("superseded", later)
    if not _resendable(row):
        return Resend("not_resendable")
    try:
        result = await request_standalone(
            conn,
            user_id=row["user_id"],
            email=row["email"],
            purpose=row["purpose"],
            idempotency_key=key,
            policy=policy,
            client_id=client_id,
            locale=row["locale"],
            replaces=verification_id,
            kept_return_to=row["return_to"],
            method=row["method"],
        )
    except RequestError as exc:
        return Resend("refused", refusal=exc)
    return Resend("already_resent" if result.replayed else "resent", result.id)


def _resendable(row: Any) -> bool:
    """Only a failed delivery that nothing replaced, whose address is still whole."""
    return (
        row["status"] == "failed"
        and row["verified_at"] is None
        and row["superseded_at"] is None
        and row["scrubbed_at"] is None
    )
