"""Webhook delivery leases: claim, complete and release deliveries, each one statement
(schema 0015's claim_webhooks_v1 and complete_webhooks_v1). As with email, every change
after a claim matches the random lease token, so a sender that lost its lease changes
nothing but the attempts log; times come from the database clock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from notifier.storage.connection import Pool
from notifier.storage.queries import sql
from notifier.webhook_outcomes import AttemptOutcome, DeliveryStatus
from notifier.webhook_signing import SecretRef


@dataclass(frozen=True, slots=True)
class Claimed:
    """A webhook delivery this sender holds, with what its request needs."""

    id: int
    lease_token: uuid.UUID
    attempt: int
    event_uid: uuid.UUID
    event_type: str
    occurred_at: datetime
    data: str  # the event's payload, JSON as the database wrote it
    endpoint_id: uuid.UUID
    url: str
    secrets: tuple[SecretRef, ...]  # the current secret, then one rotated out still signing

    @classmethod
    def from_record(cls, r: Any) -> Claimed:
        secrets = [SecretRef(r["secret_key_id"], bytes(r["secret_nonce"]))]
        if r["previous_key_id"] is not None:
            secrets.append(SecretRef(r["previous_key_id"], bytes(r["previous_nonce"])))
        return cls(
            r["id"],
            r["lease_token"],
            r["attempt"],
            r["event_uid"],
            r["event_type"],
            r["occurred_at"],
            r["data"],
            r["endpoint_id"],
            r["url"],
            tuple(secrets),
        )


@dataclass(frozen=True, slots=True)
class Attempted:
    """How one attempt ended, and what comes next (retry_delay None: nothing more)."""

    id: int
    token: uuid.UUID
    outcome: AttemptOutcome
    status_code: int | None
    detail: str | None
    duration_ms: float
    retry_delay: float | None


@dataclass(frozen=True, slots=True)
class Completed:
    id: int
    status: DeliveryStatus | None  # None: the lease was gone, nothing changed
    lease_held: bool
    endpoint_id: uuid.UUID | None
    # Set when this completion disabled the delivery's endpoint: why.
    disabled_reason: str | None


async def claim(
    pool: Pool, owner: str, lease_seconds: float, limit: int, per_endpoint: int
) -> list[Claimed]:
    rows = await pool.fetch(sql("webhook_claim"), owner, lease_seconds, limit, per_endpoint)
    return [Claimed.from_record(r) for r in rows]


async def complete(
    pool: Pool, attempts: Sequence[Attempted], owner: str, disable_after: float
) -> list[Completed]:
    rows = await pool.fetch(
        sql("webhook_complete"),
        [a.id for a in attempts],
        [a.token for a in attempts],
        [a.outcome for a in attempts],
        [a.status_code for a in attempts],
        [a.detail for a in attempts],
        [a.duration_ms for a in attempts],
        [a.retry_delay for a in attempts],
        owner,
        disable_after,
    )
    by_id = {
        r["id"]: Completed(
            r["id"], r["status"], r["lease_held"], r["endpoint_id"], r["disabled_reason"]
        )
        for r in rows
    }
    return [by_id[a.id] for a in attempts]


async def release(pool: Pool, held: Sequence[Claimed]) -> None:
    await pool.execute(sql("webhook_release"), [c.id for c in held], [c.lease_token for c in held])


async def next_due(pool: Pool) -> float | None:
    """Seconds until a delivery next comes due (None: nothing waits)."""
    seconds = await pool.fetchval(sql("webhook_next_due"))
    return None if seconds is None else max(float(seconds), 0.0)
