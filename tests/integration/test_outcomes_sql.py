"""The database takes two of the state machine's decisions inside the statements that change
the row (claim_v4's fate, complete_v2's next status). Each SQL CASE says it mirrors a
function of notifier.outcomes; these tests run both over every case and the schema's
vocabulary against the Python one, so the two cannot drift apart."""

from __future__ import annotations

import itertools
from typing import get_args

import asyncpg
import pytest

from notifier.delivery.leases import Completion, Leases
from notifier.outcomes import (
    RECORDED_OUTCOMES,
    AttemptOutcome,
    DeliveryStatus,
    Discovery,
    claim_fate,
    settle,
)
from notifier.tokens import TokenKeys
from tests.support.deliveries import enqueue

pytestmark = pytest.mark.anyio

RETRY_DELAY = 60.0
UNKNOWN_LIMIT = 3


async def test_the_claims_fate_is_claim_fate_in_every_case(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys
) -> None:
    leases = Leases(pool, "test:fate", 30.0)
    for n, (verified, superseded, expired, exhausted) in enumerate(
        itertools.product((False, True), repeat=4)
    ):
        if verified and superseded:
            continue  # the schema forbids it (a verification is one or the other)
        row = await enqueue(db, keys, f"fate{n}@example.com", user_id=f"fate-{n}")
        await db.execute(
            """UPDATE notifier.verifications SET
                   verified_at = CASE WHEN $2 THEN now() END,
                   superseded_at = CASE WHEN $3 THEN now() END,
                   expires_at = CASE WHEN $4 THEN now() - interval '1 second'
                                     ELSE now() + interval '1 hour' END
               WHERE id = $1""",
            row.id,
            verified,
            superseded,
            expired,
        )
        await db.execute(
            "UPDATE notifier.email_outbox SET attempts = $2, max_attempts = 5 WHERE id = $1",
            row.outbox_id,
            5 if exhausted else 0,
        )
        [claimed] = await leases.claim_ids([row.outbox_id], "notify")
        expected = claim_fate(
            verified=verified,
            superseded=superseded,
            expired=expired,
            attempts=5 if exhausted else 0,
            max_attempts=5,
        )
        assert claimed.fate == expected, (verified, superseded, expired, exhausted)


CASES = [
    (outcome, attempts, unknowns, late)
    for outcome in get_args(AttemptOutcome)
    for attempts, unknowns, late in itertools.product((1, 5), (0, UNKNOWN_LIMIT - 1), (False, True))
]


async def test_the_next_status_is_settle_in_every_case(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys
) -> None:
    leases = Leases(pool, "test:settle", 30.0)
    for n, (outcome, attempts, unknowns, late) in enumerate(CASES):
        row = await enqueue(db, keys, f"settle{n}@example.com", user_id=f"settle-{n}")
        [claimed] = await leases.claim_ids([row.outbox_id], "notify")
        assert claimed.lease_token is not None
        await db.execute(
            """UPDATE notifier.email_outbox SET attempts = $2, max_attempts = 5,
                      unknown_outcomes = $3 WHERE id = $1""",
            row.outbox_id,
            attempts,
            unknowns,
        )
        # The retry (RETRY_DELAY from now) lands after the link expires, or well before.
        await db.execute(
            "UPDATE notifier.verifications SET expires_at = now() + make_interval(secs => $2)"
            " WHERE id = $1",
            row.id,
            RETRY_DELAY / 2 if late else RETRY_DELAY * 10,
        )
        completion = Completion(
            id=row.outbox_id,
            token=claimed.lease_token,
            attempt=attempts,
            discovered_by="notify",
            outcome=outcome,
            retry_delay=RETRY_DELAY,
        )
        [done] = await leases.complete([completion], UNKNOWN_LIMIT)
        expected = settle(
            outcome,
            attempts=attempts,
            max_attempts=5,
            unknown_outcomes=unknowns,
            unknown_limit=UNKNOWN_LIMIT,
            retry_after_expiry=late,
        )
        assert done.status == expected, (outcome, attempts, unknowns, late)


async def domain_values(db: asyncpg.Connection, name: str) -> set[str]:
    check = await db.fetchval(
        """SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
           JOIN pg_type t ON t.oid = c.contypid
           JOIN pg_namespace n ON n.oid = t.typnamespace
           WHERE n.nspname = 'notifier' AND t.typname = $1""",
        name,
    )
    return set(
        check.split("ARRAY[", 1)[1]
        .replace("::text", "")
        .replace("'", "")
        .split("]")[0]
        .replace(" ", "")
        .split(",")
    )


async def test_the_schemas_vocabulary_is_the_python_one(db: asyncpg.Connection) -> None:
    assert await domain_values(db, "delivery_outcome") == RECORDED_OUTCOMES
    assert await domain_values(db, "discovery") == set(get_args(Discovery))
    statuses = await db.fetchval(
        """SELECT pg_get_constraintdef(oid) FROM pg_constraint
           WHERE conname = 'email_outbox_status_check'"""
    )
    assert {s for s in get_args(DeliveryStatus) if f"'{s}'" in statuses} == set(
        get_args(DeliveryStatus)
    )
