"""Deliveries written through the real enqueue path, and ways to age them without sleeping."""

from __future__ import annotations

from typing import Any

from notifier.tokens import TokenKeys
from notifier.verifications import Enqueued, insert_verification

MESSAGE_DOMAIN = "notifier.test"


async def enqueue(
    conn: Any,
    keys: TokenKeys,
    email: str = "someone@example.com",
    *,
    user_id: str = "user-1",
    purpose: str = "signup",
    ttl_seconds: float = 3600,
    max_attempts: int = 5,
) -> Enqueued:
    return await insert_verification(
        conn,
        keys=keys,
        user_id=user_id,
        email=email,
        purpose=purpose,
        ttl_seconds=ttl_seconds,
        max_attempts=max_attempts,
        message_id_domain=MESSAGE_DOMAIN,
    )


async def enqueue_many(
    conn: Any, keys: TokenKeys, count: int, prefix: str = "user"
) -> list[Enqueued]:
    async with conn.transaction():
        return [
            await enqueue(conn, keys, f"{prefix}{i}@example.com", user_id=f"{prefix}-{i}")
            for i in range(count)
        ]


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


async def attempts_of(conn: Any, outbox_id: int) -> list[Any]:
    return await conn.fetch(
        "SELECT * FROM notifier.delivery_attempts WHERE outbox_id = $1 ORDER BY id", outbox_id
    )
