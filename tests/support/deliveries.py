"""Deliveries written through the real enqueue path, and ways to age them without sleeping."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from notifier.config import RequestSettings
from notifier.storage.outbox import request_standalone
from notifier.tokens import TokenKeys
from notifier.verifications import Policy

MESSAGE_DOMAIN = "notifier.test"


# Limits out of the way unless a test asks for them.
_UNLIMITED = {"resend_limit": 1_000_000, "domain_limit": 0, "client_limit": 0, "global_limit": 0}


def policy_for_tests(keys: TokenKeys, **overrides: Any) -> Policy:
    """A request policy for tests. Overrides name Policy fields or RequestSettings fields
    (the limits), which are set on the policy's `limits`."""
    limit_fields = {f.name for f in dataclasses.fields(RequestSettings)}
    limits = {k: v for k, v in overrides.items() if k in limit_fields}
    own = {k: v for k, v in overrides.items() if k not in limit_fields}
    defaults: dict[str, Any] = {
        "ttl_seconds": 3600.0,
        "message_id_domain": MESSAGE_DOMAIN,
    }
    return Policy(
        keys=keys,
        limits=RequestSettings(**{**_UNLIMITED, **limits}),
        **{**defaults, **own},
    )


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A verification written through request_verification, with its outbox row's id."""

    id: uuid.UUID
    outbox_id: int
    expires_at: datetime


async def enqueue(
    conn: Any,
    keys: TokenKeys,
    email: str = "someone@example.com",
    *,
    user_id: str | None = None,
    purpose: str = "signup",
    ttl_seconds: float = 3600,
    max_attempts: int = 5,
    locale: str | None = None,
) -> Enqueued:
    result = await request_standalone(
        conn,
        user_id=user_id or f"user-{email}",
        email=email,
        purpose=purpose,
        policy=policy_for_tests(keys, ttl_seconds=ttl_seconds, max_attempts=max_attempts),
        locale=locale,
    )
    outbox_id = await conn.fetchval(
        "SELECT id FROM notifier.email_outbox WHERE verification_id = $1", result.id
    )
    return Enqueued(result.id, outbox_id, result.expires_at)


async def enqueue_many(
    conn: Any, keys: TokenKeys, count: int, prefix: str = "user"
) -> list[Enqueued]:
    async with conn.transaction():
        return [
            await enqueue(conn, keys, f"{prefix}{i}@example.com", user_id=f"{prefix}-{i}")
            for i in range(count)
        ]


async def link_token(conn: Any, keys: TokenKeys, verification_id: uuid.UUID | str) -> str:
    """The token of a verification's emailed link, derived as the worker derives it."""
    row = await conn.fetchrow(
        "SELECT id, token_key_id, token_nonce FROM notifier.verifications WHERE id = $1",
        uuid.UUID(str(verification_id)),
    )
    token: str = keys.derive(row["token_key_id"], row["id"], bytes(row["token_nonce"]))
    return token


async def code_of(conn: Any, keys: TokenKeys, verification_id: uuid.UUID | str) -> str:
    """The code a verification's email carries, derived as the worker derives it."""
    row = await conn.fetchrow(
        "SELECT id, token_key_id, token_nonce, code_digits FROM notifier.verifications "
        "WHERE id = $1",
        uuid.UUID(str(verification_id)),
    )
    return keys.code(row["token_key_id"], row["id"], bytes(row["token_nonce"]), row["code_digits"])


async def expire_lease(conn: Any, outbox_id: int) -> None:
    """Make a lease stale by backdating it: the database clock decides, not a sleep."""
    await conn.execute(
        "UPDATE notifier.email_outbox SET lease_until = now() - interval '1 second' WHERE id = $1",
        outbox_id,
    )


async def make_due(conn: Any, outbox_id: int) -> None:
    await conn.execute(
        "UPDATE notifier.email_outbox SET next_attempt_at = now() WHERE id = $1", outbox_id
    )


async def expire_verification(conn: Any, outbox_id: int) -> None:
    await conn.execute(
        """UPDATE notifier.verifications SET expires_at = now() - interval '1 second'
           WHERE id = (SELECT verification_id FROM notifier.email_outbox WHERE id = $1)""",
        outbox_id,
    )


async def outbox_row(conn: Any, outbox_id: int) -> Any:
    return await conn.fetchrow("SELECT * FROM notifier.email_outbox WHERE id = $1", outbox_id)


async def attempts_of(conn: Any, outbox_id: int) -> Any:
    return await conn.fetch(
        "SELECT * FROM notifier.delivery_attempts WHERE outbox_id = $1 ORDER BY id", outbox_id
    )
