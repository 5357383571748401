"""Rows written straight into the schema, for tests that exercise the database layer alone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

# One statement each, so a test of the trigger sees exactly one INSERT per call.
INSERT_VERIFICATIONS = """
INSERT INTO notifier.verifications
    (user_id, email, token_key_id, token_nonce, token_hash, expires_at)
SELECT 'user-' || g, 'user' || g || '@example.test', 'k1',
       decode(md5(random()::text), 'hex'), sha256(gen_random_uuid()::text::bytea),
       now() + interval '1 hour'
FROM generate_series(1, $1) AS g
RETURNING id
"""

INSERT_OUTBOX = """
INSERT INTO notifier.email_outbox (verification_id, message_id, next_attempt_at)
SELECT v, '<verify.' || v || '@example.test>', now() + $2::interval
FROM unnest($1::uuid[]) AS v
RETURNING id
"""


async def insert_verifications(conn: Any, count: int) -> list[Any]:
    return [r["id"] for r in await conn.fetch(INSERT_VERIFICATIONS, count)]


async def insert_outbox(
    conn: Any, verification_ids: list[Any], delay: timedelta = timedelta(0)
) -> list[int]:
    return [r["id"] for r in await conn.fetch(INSERT_OUTBOX, verification_ids, delay)]


async def insert_deliveries(conn: Any, count: int, delay: timedelta = timedelta(0)) -> list[int]:
    """`count` verifications and their outbox rows, the outbox rows in one INSERT."""
    async with conn.transaction():
        return await insert_outbox(conn, await insert_verifications(conn, count), delay)
