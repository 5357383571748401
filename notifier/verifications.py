"""Verifications: writing one, with its outbox row, inside the caller's transaction."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from notifier.queries import sql
from notifier.tokens import TokenKeys


def message_id_for(verification_id: uuid.UUID, domain: str) -> str:
    """The delivery's Message-ID: fixed at enqueue and the same on every attempt (invariant 6)."""
    return f"<verify.{verification_id}@{domain}>"


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A verification written with its outbox row."""

    id: uuid.UUID
    outbox_id: int
    expires_at: datetime
    created_at: datetime


async def insert_verification(
    conn: Any,
    *,
    keys: TokenKeys,
    user_id: str,
    email: str,
    purpose: str,
    ttl_seconds: float,
    max_attempts: int,
    message_id_domain: str,
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Enqueued:
    """Write a verification and its outbox row in one statement on `conn`.

    The caller owns the transaction: the NOTIFY fires only if it commits. The raw token is
    not returned or stored; the worker derives it again when it sends.
    """
    verification_id = uuid.uuid4()
    issued = keys.issue(verification_id)
    row = await conn.fetchrow(
        sql("insert_verification"),
        verification_id,
        user_id,
        email,
        purpose,
        issued.key_id,
        issued.nonce,
        issued.token_hash,
        ttl_seconds,
        message_id_for(verification_id, message_id_domain),
        max_attempts,
        traceparent,
        tracestate,
    )
    return Enqueued(row["id"], row["outbox_id"], row["expires_at"], row["created_at"])
