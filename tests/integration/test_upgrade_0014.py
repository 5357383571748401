"""Upgrading to schema 0014 keeps what was there meaning what it should: a suppression stored
for a canonical mailbox by an earlier release comes to name the address that was refused."""

from __future__ import annotations

import uuid

import pytest

from notifier.storage import migrations
from notifier.storage.database import connect

pytestmark = pytest.mark.anyio

FAIR_LIMITS = 14


async def test_a_suppression_an_earlier_release_keyed_by_mailbox_is_keyed_by_the_refused_address(
    empty_database_url: str,
) -> None:
    shipped = migrations.discover()
    conn = await connect(empty_database_url)
    try:
        await migrations.migrate(conn, [m for m in shipped if m.version < FAIR_LIMITS])
        verification = uuid.uuid4()
        await conn.execute(
            """INSERT INTO notifier.verifications
                   (id, user_id, email, mailbox, token_key_id, token_nonce, token_hash,
                    expires_at)
               VALUES ($1, 'alice', 'Alice+X@corp.example', 'alice@corp.example', 'k1',
                       '\\x00000000000000000000000000000000', sha256('t'::bytea), now())""",
            verification,
        )
        outbox = await conn.fetchval(
            """INSERT INTO notifier.email_outbox (verification_id, message_id, status,
                   attempts, completed_at)
               VALUES ($1, '<verify.x@example.com>', 'failed', 1, now()) RETURNING id""",
            verification,
        )
        # What complete_v1 stored for a 550 5.1.1 to the tag: the canonical mailbox.
        await conn.execute(
            """INSERT INTO notifier.suppressed_addresses (email, reason, outbox_id, expires_at)
               VALUES ('alice@corp.example', '550 5.1.1', $1, now() + interval '30 days')""",
            outbox,
        )
        await migrations.migrate(conn, shipped)
        keys = [
            r["email"] for r in await conn.fetch("SELECT email FROM notifier.suppressed_addresses")
        ]
        assert keys == ["alice+x@corp.example"]
    finally:
        await conn.close()
