"""Outbox leases: claim, check, renew, complete and release rows, each as one statement.

Every change after a claim matches id, status 'sending' and the random lease token, so a
worker that lost its lease changes nothing (invariant 3). Times come from the database
clock, never the worker's.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from notifier.outcomes import (
    AttemptOutcome,
    DeliveryStatus,
    Discovery,
    Fate,
    Method,
    Sendability,
)
from notifier.storage.connection import Pool
from notifier.storage.queries import arguments, sql


@dataclass(frozen=True, slots=True)
class Claimed:
    """A row a claim took: under this worker's lease when fate is "send", else settled."""

    id: int
    fate: Fate
    lease_token: uuid.UUID | None
    attempt: int
    message_id: str
    verification_id: uuid.UUID
    discovered_by: Discovery
    email: str
    purpose: str
    token_key_id: str
    token_nonce: bytes
    expires_at: datetime
    traceparent: str | None
    tracestate: str | None
    claimed_at: datetime | None = None
    # The language the email is to be written in (None: English), and when the verification
    # was created (by the database clock, like expires_at).
    locale: str | None = None
    issued_at: datetime | None = None
    # How it is confirmed, and for a code its length and lifetime (the code itself is
    # derived at send time, like the token).
    method: Method = "link"
    code_digits: int | None = None
    code_expires_at: datetime | None = None

    @classmethod
    def from_record(cls, r: Any) -> Claimed:
        return cls(
            id=r["id"],
            fate=r["fate"],
            lease_token=r["lease_token"],
            attempt=r["attempts"],
            message_id=r["message_id"],
            verification_id=r["verification_id"],
            discovered_by=r["discovered_by"],
            email=r["email"],
            purpose=r["purpose"],
            token_key_id=r["token_key_id"],
            token_nonce=bytes(r["token_nonce"]),
            expires_at=r["expires_at"],
            traceparent=r["traceparent"],
            tracestate=r["tracestate"],
            claimed_at=r["claimed_at"],
            locale=r["locale"],
            issued_at=r["issued_at"],
            method=r["method"],
            code_digits=r["code_digits"],
            code_expires_at=r["code_expires_at"],
        )


@dataclass(frozen=True, slots=True)
class Held:
    """A lease this worker believes it holds."""

    id: int
    token: uuid.UUID


@dataclass(frozen=True, slots=True)
class Completion:
    """How one attempt ended, as the worker saw it."""

    id: int
    token: uuid.UUID
    attempt: int
    discovered_by: Discovery
    outcome: AttemptOutcome
    retry_delay: float = 0.0
    smtp_code: int | None = None
    detail: str | None = None
    provider_message_id: str | None = None
    duration_ms: float | None = None
    body_sent: bool = False
    claimed_at: datetime | None = None
    # Seconds the SMTP exchange took (for metrics; not stored).
    smtp_seconds: float | None = None
    # A permanent refusal the recipient's mailbox caused: the address to suppress (folded,
    # notifier.addresses.folded); None suppresses nothing.
    suppress: str | None = None
    # A throttle saying the provider's daily quota is spent: every worker pauses (not stored).
    quota_spent: bool = False


@dataclass(frozen=True, slots=True)
class Completed:
    """What the completion did: the row's new status, or lease_held False if it did nothing."""

    id: int
    lease_held: bool
    status: DeliveryStatus | None
    next_attempt_at: datetime | None


class Leases:
    """The lease operations of one worker (its owner name and lease length) over a pool.

    Each method is one statement on whichever pool connection is free, so claims, checks and
    completions from many tasks never wait on each other's transactions.
    """

    def __init__(
        self, pool: Pool, owner: str, lease_seconds: float, suppression_ttl: float = 30 * 86400.0
    ) -> None:
        self.pool = pool
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.suppression_ttl = suppression_ttl

    async def claim_ids(self, ids: Sequence[int], discovered_by: Discovery) -> list[Claimed]:
        values = {
            "candidate_ids": list(ids),
            "owner": self.owner,
            "lease_seconds": self.lease_seconds,
            "discovery": discovered_by,
        }
        rows = await self.pool.fetch(sql("claim_by_ids"), *arguments("claim_by_ids", values))
        return [Claimed.from_record(r) for r in rows]

    async def claim_due(self, limit: int, discovered_by: Discovery) -> list[Claimed]:
        rows = await self.pool.fetch(
            sql("claim_due"), limit, self.owner, self.lease_seconds, discovered_by
        )
        return [Claimed.from_record(r) for r in rows]

    async def check(self, held: Sequence[Held]) -> list[Sendability]:
        rows = await self.pool.fetch(
            sql("check_sendable"), [h.id for h in held], [h.token for h in held]
        )
        return [
            Sendability(r["lease_held"], r["verification"] if r["lease_held"] else None)
            for r in rows
        ]

    async def renew(self, held: Sequence[Held]) -> set[int]:
        rows = await self.pool.fetch(
            sql("renew_leases"), [h.id for h in held], [h.token for h in held], self.lease_seconds
        )
        return {r["id"] for r in rows}

    async def complete(
        self, completions: Sequence[Completion], unknown_outcome_limit: int
    ) -> list[Completed]:
        c = completions
        values = {
            "ids": [x.id for x in c],
            "tokens": [x.token for x in c],
            "outcomes": [x.outcome for x in c],
            "retry_delays": [x.retry_delay for x in c],
            "smtp_codes": [x.smtp_code for x in c],
            "details": [x.detail for x in c],
            "provider_message_ids": [x.provider_message_id for x in c],
            "durations_ms": [x.duration_ms for x in c],
            "bodies_sent": [x.body_sent for x in c],
            "attempt_numbers": [x.attempt for x in c],
            "discoveries": [x.discovered_by for x in c],
            "owner": self.owner,
            "unknown_limit": unknown_outcome_limit,
            "claim_times": [x.claimed_at for x in c],
            "suppression_keys": [x.suppress for x in c],
            "suppression_seconds": self.suppression_ttl,
        }
        statement = "complete_attempts"
        rows = await self.pool.fetch(sql(statement), *arguments(statement, values))
        by_id = {r["id"]: r for r in rows}
        return [
            Completed(
                x.id,
                by_id[x.id]["lease_held"],
                by_id[x.id]["status"],
                by_id[x.id]["next_attempt_at"],
            )
            for x in c
        ]

    async def defer(self, held: Sequence[Held], delay: float) -> set[int]:
        """Hand rows back uncounted, due after `delay` seconds; the ids still held here."""
        rows = await self.pool.fetch(
            sql("defer_leases"), [h.id for h in held], [h.token for h in held], delay
        )
        return {r["id"] for r in rows}

    async def held_here(self) -> list[Held]:
        """Every lease the database says this owner holds, whether or not it knows."""
        rows = await self.pool.fetch(sql("leases_held_by"), self.owner)
        return [Held(r["id"], r["lease_token"]) for r in rows]

    async def release(self, held: Sequence[Held]) -> int:
        row = await self.pool.fetchrow(
            sql("release_leases"), [h.id for h in held], [h.token for h in held], self.owner
        )
        return int(row["released"])
