"""The library call: a verification written inside the caller's own transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import orjson
import pytest

import notifier
from notifier.tokens import TokenKeys
from notifier.verifications import InvalidRequest, Throttled
from tests.support.deliveries import policy_for_tests

pytestmark = pytest.mark.anyio


class Heard(list[str]):
    """Payloads a listening connection received; `sentinel_seen` is set by the sentinel."""

    __hash__ = object.__hash__  # type: ignore[assignment]  # asyncpg keeps listeners in a set

    def __init__(self) -> None:
        super().__init__()
        self.sentinel_seen = anyio.Event()

    def __call__(self, *args: Any) -> None:
        self.append(args[-1])
        if args[-1] == "sentinel":
            self.sentinel_seen.set()


@pytest.fixture
async def heard(database_url: str) -> AsyncIterator[Heard]:
    listener = await asyncpg.connect(database_url)
    payloads = Heard()
    await listener.add_listener("notifier_outbox_v1", payloads)
    yield payloads
    await listener.close()


async def sentinel(db: asyncpg.Connection, heard: Heard) -> None:
    """Return once everything committed before now has reached the listener (commit order)."""
    await db.execute("SELECT pg_notify('notifier_outbox_v1', 'sentinel')")
    with anyio.fail_after(5):
        await heard.sentinel_seen.wait()


async def test_rollback_of_the_callers_transaction_leaves_nothing_behind(
    db: asyncpg.Connection, keys: TokenKeys, heard: Heard
) -> None:
    tx = db.transaction()
    await tx.start()
    await db.execute("CREATE TEMP TABLE app_users (id text)")  # the caller's own work
    await notifier.request_verification(
        db, user_id="u1", email="ada@example.com", policy=policy_for_tests(keys)
    )
    await tx.rollback()
    await sentinel(db, heard)
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 0
    assert heard == ["sentinel"]


async def test_commit_of_the_callers_transaction_notifies_the_workers(
    db: asyncpg.Connection, keys: TokenKeys, heard: Heard
) -> None:
    async with db.transaction():
        result = await notifier.request_verification(
            db, user_id="u1", email="ada@example.com", policy=policy_for_tests(keys)
        )
        outbox_id = await db.fetchval(
            "SELECT id FROM notifier.email_outbox WHERE verification_id = $1", result.id
        )
    await sentinel(db, heard)
    assert orjson.loads(heard[0]) == {"v": 1, "ids": [outbox_id]}
    assert result.status == "pending"


async def test_a_refused_request_writes_nothing_and_keeps_the_callers_transaction_usable(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    policy = policy_for_tests(keys, resend_limit=1)
    async with db.transaction():
        await notifier.request_verification(db, user_id="u1", email="a@example.com", policy=policy)
        with pytest.raises(Throttled):
            await notifier.request_verification(
                db, user_id="u1", email="b@example.com", policy=policy
            )
        with pytest.raises(InvalidRequest):
            await notifier.request_verification(db, user_id="u1", email="nope", policy=policy)
        assert await db.fetchval("SELECT 1") == 1
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 1
