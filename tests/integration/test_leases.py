"""Lease operations against a real PostgreSQL: claims, the gate, renewal, completion, release."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import asyncpg
import orjson
import pytest

from notifier.delivery.leases import Claimed, Completion, Held, Leases
from notifier.storage.queries import sql
from notifier.tokens import TokenKeys
from tests.support.deliveries import (
    attempts_of,
    enqueue,
    enqueue_many,
    expire_lease,
    expire_verification,
    outbox_row,
)

pytestmark = pytest.mark.anyio

LEASE_SECONDS = 30.0
UNKNOWN_LIMIT = 3


@pytest.fixture
def leases(pool: asyncpg.Pool) -> Leases:
    return Leases(pool, "host:1/a", LEASE_SECONDS)


@pytest.fixture
def rival(pool: asyncpg.Pool) -> Leases:
    return Leases(pool, "host:2/b", LEASE_SECONDS)


def held(row: Claimed) -> Held:
    assert row.lease_token is not None
    return Held(row.id, row.lease_token)


def completion(row: Any, outcome: str, **fields: Any) -> Completion:
    return Completion(
        id=row.id,
        token=row.lease_token,
        attempt=row.attempt,
        discovered_by=row.discovered_by,
        outcome=outcome,  # type: ignore[arg-type]
        **fields,
    )


async def test_claim_leases_a_due_row_with_a_fresh_token_and_database_expiry(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    stored = await outbox_row(db, enqueued.outbox_id)
    assert (row.fate, stored["status"], stored["attempts"]) == ("send", "sending", 1)
    assert stored["lease_token"] == row.lease_token
    assert stored["lease_owner"] == "host:1/a"
    assert stored["discovered_by"] == "notify"
    remaining = await db.fetchval(
        "SELECT extract(epoch FROM lease_until - now()) FROM notifier.email_outbox WHERE id = $1",
        enqueued.outbox_id,
    )
    assert LEASE_SECONDS - 5 < remaining <= LEASE_SECONDS


async def test_claim_returns_what_the_send_needs(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys, "reader@example.com", purpose="signup")
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    assert row.email == "reader@example.com"
    assert row.verification_id == enqueued.id
    assert row.message_id == f"<verify.{enqueued.id}@notifier.test>"
    assert len(row.token_nonce) == 32


async def test_a_leased_row_is_not_claimed_again(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases, rival: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    assert await leases.claim_ids([enqueued.outbox_id], "notify")
    assert await rival.claim_ids([enqueued.outbox_id], "notify") == []
    assert await rival.claim_due(10, "sweep") == []


async def test_claim_skips_rows_locked_by_another_transaction_without_waiting(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, leases: Leases
) -> None:
    first, second = await enqueue_many(db, keys, 2)
    other = await asyncpg.connect(database_url)
    try:
        async with other.transaction():
            await other.execute(
                "SELECT 1 FROM notifier.email_outbox WHERE id = $1 FOR UPDATE", first.outbox_id
            )
            with anyio.fail_after(5):
                rows = await leases.claim_ids([first.outbox_id, second.outbox_id], "notify")
        assert [r.id for r in rows] == [second.outbox_id]
    finally:
        await other.close()


async def test_concurrent_claims_never_hand_one_row_to_two_owners(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys
) -> None:
    ids = [e.outbox_id for e in await enqueue_many(db, keys, 300)]
    claimants = [Leases(pool, f"host:{n}/w", LEASE_SECONDS) for n in range(6)]
    claimed: list[int] = []

    async def claim_all(leases: Leases) -> None:
        for start in range(0, len(ids), 25):
            claimed.extend(r.id for r in await leases.claim_ids(ids[start : start + 50], "notify"))
        claimed.extend(r.id for r in await leases.claim_due(50, "sweep"))

    async with anyio.create_task_group() as tg:
        for leases in claimants:
            tg.start_soon(claim_all, leases)
    # Every row was claimed, and exactly once: a row one claimant skipped (locked) was the
    # other's, and no claim ever returned a row that another also got.
    assert sorted(claimed) == sorted(ids)
    owners = await db.fetch(
        "SELECT lease_owner, count(*) FROM notifier.email_outbox WHERE status = 'sending'"
        " GROUP BY lease_owner"
    )
    assert sum(r["count"] for r in owners) == len(ids)


async def test_expired_lease_is_reclaimed_and_the_vanished_attempt_recorded(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases, rival: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [first] = await leases.claim_ids([enqueued.outbox_id], "notify")
    await expire_lease(db, enqueued.outbox_id)
    [second] = await rival.claim_due(10, "sweep")
    assert (second.attempt, second.discovered_by) == (2, "expired_lease")
    assert second.lease_token != first.lease_token
    [vanished] = await attempts_of(db, enqueued.outbox_id)
    assert (vanished["attempt"], vanished["outcome"], vanished["lease_owner"]) == (
        1,
        "lease_expired",
        "host:1/a",
    )


async def test_lease_expired_on_the_last_allowed_attempt_fails_the_row(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases, rival: Leases
) -> None:
    enqueued = await enqueue(db, keys, max_attempts=1)
    await leases.claim_ids([enqueued.outbox_id], "notify")
    await expire_lease(db, enqueued.outbox_id)
    [row] = await rival.claim_due(10, "sweep")
    stored = await outbox_row(db, enqueued.outbox_id)
    assert (row.fate, stored["status"], stored["attempts"]) == ("exhausted", "failed", 1)
    assert "worker stopped" in stored["last_error"]


async def test_claim_settles_an_expired_verification_without_sending_or_counting(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    await expire_verification(db, enqueued.outbox_id)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    stored = await outbox_row(db, enqueued.outbox_id)
    assert (row.fate, stored["status"], stored["attempts"]) == ("expired", "expired", 0)
    assert stored["lease_token"] is None


async def test_claim_settles_a_superseded_verification_as_expired(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    await db.execute(
        "UPDATE notifier.verifications SET superseded_at = now() WHERE id = $1", enqueued.id
    )
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    stored = await outbox_row(db, enqueued.outbox_id)
    assert (row.fate, stored["status"], stored["last_outcome"]) == (
        "superseded",
        "expired",
        "superseded",
    )


async def test_sending_row_without_a_lease_is_rejected_by_the_schema(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys)
    with pytest.raises(asyncpg.CheckViolationError, match="lease_iff_sending"):
        await db.execute(
            "UPDATE notifier.email_outbox SET status = 'sending' WHERE id = $1", enqueued.outbox_id
        )


async def test_gate_says_live_while_the_lease_is_held(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    [answer] = await leases.check([held(row)])
    assert (answer.lease_held, answer.verification) == (True, "live")


async def test_gate_refuses_an_expired_lease_even_before_anyone_reclaims_it(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    await expire_lease(db, row.id)
    [answer] = await leases.check([held(row)])
    assert answer.lease_held is False


async def test_gate_reports_a_verification_that_expired_after_the_claim(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    await expire_verification(db, row.id)
    [answer] = await leases.check([held(row)])
    assert (answer.lease_held, answer.verification) == (True, "expired")


async def test_gate_answers_in_request_order(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    rows = await leases.claim_ids([e.outbox_id for e in await enqueue_many(db, keys, 5)], "notify")
    await expire_lease(db, rows[1].id)
    held_rows = [held(r) for r in reversed(rows)]
    answers = await leases.check(held_rows)
    assert [a.lease_held for a in answers] == [True, True, True, False, True]


async def test_renewal_extends_only_leases_still_held(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    a, b = await leases.claim_ids([e.outbox_id for e in await enqueue_many(db, keys, 2)], "notify")
    await db.execute(
        "UPDATE notifier.email_outbox SET lease_until = now() + interval '1 second' WHERE id = $1",
        a.id,
    )
    renewed = await leases.renew([held(a), Held(b.id, uuid.uuid4())])
    assert renewed == {a.id}
    remaining = await db.fetchval(
        "SELECT extract(epoch FROM lease_until - now()) FROM notifier.email_outbox WHERE id = $1",
        a.id,
    )
    assert remaining > LEASE_SECONDS - 5


async def test_sent_completion_clears_the_lease_and_keeps_the_provider_id(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    [done] = await leases.complete(
        [
            completion(
                row, "sent", smtp_code=250, provider_message_id="queued as X1", body_sent=True
            )
        ],
        UNKNOWN_LIMIT,
    )
    stored = await outbox_row(db, row.id)
    assert (done.lease_held, done.status, stored["status"]) == (True, "sent", "sent")
    assert stored["lease_token"] is None and stored["completed_at"] is not None
    assert stored["provider_message_id"] == "queued as X1"
    [attempt] = await attempts_of(db, row.id)
    assert (attempt["outcome"], attempt["smtp_code"], attempt["lease_held"]) == ("sent", 250, True)


async def test_stale_worker_cannot_complete_a_reclaimed_row(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases, rival: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [stale] = await leases.claim_ids([enqueued.outbox_id], "notify")
    await expire_lease(db, enqueued.outbox_id)
    [fresh] = await rival.claim_due(10, "sweep")
    [done] = await leases.complete([completion(stale, "sent", body_sent=True)], UNKNOWN_LIMIT)
    stored = await outbox_row(db, enqueued.outbox_id)
    assert done.lease_held is False
    assert (stored["status"], stored["lease_token"]) == ("sending", fresh.lease_token)
    recorded = (await attempts_of(db, enqueued.outbox_id))[-1]
    assert (recorded["outcome"], recorded["lease_held"], recorded["lease_owner"]) == (
        "sent",
        False,
        "host:1/a",
    )


async def test_transient_failure_schedules_a_retry_after_the_given_delay(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    [done] = await leases.complete(
        [completion(row, "transient", retry_delay=120.0, smtp_code=451)], UNKNOWN_LIMIT
    )
    assert done.status == "pending"
    wait = await db.fetchval(
        "SELECT extract(epoch FROM next_attempt_at - now())"
        " FROM notifier.email_outbox WHERE id = $1",
        row.id,
    )
    assert 115 < wait <= 120
    assert await leases.claim_due(10, "sweep") == []


async def test_transient_failure_on_the_last_attempt_fails_the_row(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys, max_attempts=1)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    [done] = await leases.complete(
        [completion(row, "transient", retry_delay=1.0, detail="451 try later")], UNKNOWN_LIMIT
    )
    stored = await outbox_row(db, row.id)
    assert (done.status, stored["status"]) == ("failed", "failed")
    assert stored["last_error"].startswith("gave up after 1 attempts")


async def test_retry_that_would_land_after_the_link_expires_is_not_scheduled(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys, ttl_seconds=100)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    [done] = await leases.complete([completion(row, "transient", retry_delay=300.0)], UNKNOWN_LIMIT)
    stored = await outbox_row(db, row.id)
    assert (done.status, stored["status"]) == ("expired", "expired")
    assert "expire before the next attempt" in stored["last_error"]


async def test_permanent_failure_fails_at_once(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    [done] = await leases.complete(
        [completion(row, "permanent", smtp_code=550, detail="550 5.1.1 user unknown")],
        UNKNOWN_LIMIT,
    )
    stored = await outbox_row(db, row.id)
    assert (done.status, stored["attempts"]) == ("failed", 1)
    assert stored["last_error"] == "550 5.1.1 user unknown"


async def test_repeated_unknown_outcomes_are_flagged_and_stop(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys, max_attempts=10)
    statuses = []
    for _ in range(UNKNOWN_LIMIT):
        await db.execute(
            "UPDATE notifier.email_outbox SET next_attempt_at = now() WHERE id = $1",
            enqueued.outbox_id,
        )
        [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
        [done] = await leases.complete(
            [completion(row, "unknown", retry_delay=1.0, body_sent=True)], UNKNOWN_LIMIT
        )
        statuses.append(done.status)
    stored = await outbox_row(db, enqueued.outbox_id)
    assert statuses == ["pending", "pending", "failed"]
    assert stored["unknown_outcomes"] == UNKNOWN_LIMIT
    assert stored["last_error"].startswith("flagged")


async def test_release_returns_the_row_uncounted_and_announces_it(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    listener = await asyncpg.connect(database_url)
    heard: list[str] = []
    arrived = anyio.Event()

    def hear(*args: Any) -> None:
        heard.append(args[-1])
        arrived.set()

    await listener.add_listener("notifier_outbox_v1", hear)
    try:
        assert await leases.release([held(row)]) == 1
        with anyio.fail_after(5):
            await arrived.wait()
    finally:
        await listener.close()
    stored = await outbox_row(db, row.id)
    assert (stored["status"], stored["attempts"], stored["lease_token"]) == ("pending", 0, None)
    assert [orjson.loads(p) for p in heard] == [{"v": 1, "ids": [row.id]}]
    [attempt] = await attempts_of(db, row.id)
    assert attempt["outcome"] == "released"


async def test_sweep_claim_uses_the_partial_index_on_due_rows(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    await db.execute(
        """INSERT INTO notifier.verifications
               (user_id, email, token_key_id, token_nonce, token_hash, expires_at)
           SELECT 'u' || g, 'u' || g || '@example.com', 'k', gen_random_uuid()::text::bytea,
                  sha256(g::text::bytea), now() + interval '1 hour'
           FROM generate_series(1, 5000) g"""
    )
    await db.execute(
        """INSERT INTO notifier.email_outbox (verification_id, message_id, status, attempts,
                                              completed_at)
           SELECT id, '<' || id || '@t>', 'sent', 1, now() FROM notifier.verifications"""
    )
    await enqueue_many(db, keys, 20)
    await db.execute("ANALYZE notifier.email_outbox")
    # The real sweep statement, explained (not run) with real parameters.
    rows = await db.fetch("EXPLAIN " + sql("claim_due"), 10, "host:1/a", LEASE_SECONDS, "sweep")
    plan = "\n".join(r[0] for r in rows)
    assert "email_outbox_pending_due_idx" in plan, plan
    assert "email_outbox_sending_lease_idx" in plan, plan


async def test_claim_time_is_kept_on_the_row_and_on_its_attempt(
    db: asyncpg.Connection, keys: TokenKeys, leases: Leases
) -> None:
    enqueued = await enqueue(db, keys)
    [row] = await leases.claim_ids([enqueued.outbox_id], "notify")
    stored = await outbox_row(db, row.id)
    assert row.claimed_at == stored["claimed_at"] is not None
    await leases.complete([completion(row, "sent", claimed_at=row.claimed_at)], UNKNOWN_LIMIT)
    [attempt] = await attempts_of(db, row.id)
    assert attempt["claimed_at"] == row.claimed_at
