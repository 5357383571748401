"""The library call on every driver an app may hold: asyncpg, psycopg (sync and async),
SQLAlchemy (Core and ORM, sync and async, on psycopg, psycopg2 and asyncpg) and Django.
One contract, run over each: the verification and its email exist only if the caller's
transaction commits; a refusal never spoils that transaction; outside one, nothing at all."""

from __future__ import annotations

import uuid

import anyio
import asyncpg
import pytest

import notifier
from notifier import events
from notifier.storage.outbox import request_standalone
from notifier.tokens import TokenKeys
from tests.support.app_drivers import (
    CREATE_OWN_TABLE,
    DRIVERS,
    OWN_TABLE,
    Driver,
    app_connection,
    own_insert,
)
from tests.support.deliveries import code_of, policy_for_tests
from tests.support.recorder import Recorder
from tests.support.relay import relay_to
from tests.support.smtp_server import SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 15
BY_DRIVER = pytest.mark.parametrize("driver", DRIVERS, ids=str)


@pytest.fixture
async def own_table(db: asyncpg.Connection) -> None:
    await db.execute(CREATE_OWN_TABLE)


async def counts(db: asyncpg.Connection) -> tuple[int, int]:
    return (
        await db.fetchval("SELECT count(*) FROM notifier.verifications"),
        await db.fetchval(f"SELECT count(*) FROM {OWN_TABLE}"),
    )


@BY_DRIVER
async def test_a_committed_signup_is_delivered_found_by_its_notification(
    driver: Driver,
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    own_table: None,
) -> None:
    recorder = Recorder()
    async with (
        running_worker(database_url, keys, smtp_server.settings(), recorder=recorder),
        app_connection(driver, database_url) as app,
    ):
        await app.begin()
        await app.execute(own_insert("ada"))
        result = await app.request(
            user_id="ada", email="ada@example.com", policy=policy_for_tests(keys)
        )
        await app.commit()
        with anyio.fail_after(WAIT):
            [claimed] = await recorder.wait_for_kind(events.Claimed)
            await recorder.wait_for_kind(events.Completed)
    assert claimed.discovered_by == "notify"
    [received] = smtp_server.received
    assert received.message_id == f"<verify.{result.id}@notifier.test>"
    assert await counts(db) == (1, 1)


@BY_DRIVER
async def test_a_rolled_back_signup_leaves_no_verification_and_sends_nothing(
    driver: Driver,
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    own_table: None,
) -> None:
    recorder = Recorder()
    async with (
        running_worker(database_url, keys, smtp_server.settings(), recorder=recorder) as worker,
        app_connection(driver, database_url) as app,
    ):
        await app.begin()
        await app.execute(own_insert("ada"))
        await app.request(user_id="ada", email="ada@example.com", policy=policy_for_tests(keys))
        await app.rollback()
        # Something committed after it is delivered; nothing of the rolled-back one was.
        async with db.transaction():
            await notifier.request_verification(
                db, user_id="later", email="later@example.com", policy=policy_for_tests(keys)
            )
        with anyio.fail_after(WAIT):
            await recorder.wait_for_kind(events.Completed)
        assert worker.in_flight == 0
    assert [r.recipients for r in smtp_server.received] == [["later@example.com"]]
    assert await counts(db) == (1, 0)


@BY_DRIVER
async def test_a_refusal_leaves_the_callers_own_work_committable(
    driver: Driver, db: asyncpg.Connection, database_url: str, keys: TokenKeys, own_table: None
) -> None:
    policy = policy_for_tests(keys, resend_limit=1)
    async with app_connection(driver, database_url) as app:
        await app.begin()
        await app.execute(own_insert("ada"))
        await app.request(user_id="ada", email="ada@example.com", policy=policy)
        with pytest.raises(notifier.Throttled):
            await app.request(user_id="ada", email="ada@other.example", policy=policy)
        with pytest.raises(notifier.InvalidRequest):
            await app.request(user_id="ada", email="not an address", policy=policy)
        await app.execute(own_insert("grace"))
        await app.commit()
    assert await counts(db) == (1, 2)


@BY_DRIVER
async def test_the_same_idempotency_key_replays_and_another_body_conflicts(
    driver: Driver, db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    policy = policy_for_tests(keys)
    async with app_connection(driver, database_url) as app:
        await app.begin()
        first = await app.request(
            user_id="ada", email="ada@example.com", idempotency_key="signup-1", policy=policy
        )
        again = await app.request(
            user_id="ada", email="ada@example.com", idempotency_key="signup-1", policy=policy
        )
        with pytest.raises(notifier.IdempotencyConflict):
            await app.request(
                user_id="ada", email="ada@else.example", idempotency_key="signup-1", policy=policy
            )
        await app.commit()
    assert isinstance(first.id, uuid.UUID)
    assert (again.id, again.replayed, first.replayed) == (first.id, True, False)
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 1


@BY_DRIVER
async def test_outside_a_transaction_the_call_is_refused_and_writes_nothing(
    driver: Driver, db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    async with app_connection(driver, database_url) as app:
        with pytest.raises(notifier.NotInTransaction, match="inside the caller's transaction"):
            await app.request_in_autocommit(
                user_id="ada", email="ada@example.com", policy=policy_for_tests(keys)
            )
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 0


@BY_DRIVER
async def test_a_code_requested_on_the_driver_is_confirmed_on_it_outside_a_transaction(
    driver: Driver, db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    policy = policy_for_tests(keys)
    async with app_connection(driver, database_url) as app:
        await app.begin()
        result = await app.request(
            user_id="ada", email="ada@example.com", policy=policy, method="code"
        )
        await app.commit()
        code = await code_of(db, keys, result.id)
        answer = await app.confirm_code_in_autocommit(result.id, code, policy)
    assert (answer.outcome, result.method) == ("verified", "code")


@BY_DRIVER
async def test_inside_a_transaction_a_code_is_not_judged(
    driver: Driver, db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    # A rollback would undo the count of a wrong code: fresh guesses for the asking.
    policy = policy_for_tests(keys)
    result = await request_standalone(
        db, user_id="ada", email="ada@example.com", policy=policy, method="code"
    )
    async with app_connection(driver, database_url) as app:
        await app.begin()
        with pytest.raises(notifier.InTransaction):
            await app.confirm_code(result.id, "000000", policy)
        await app.rollback()
    assert await db.fetchval("SELECT code_failures FROM notifier.verifications") == 0


@BY_DRIVER
async def test_the_request_is_one_round_trip_inside_the_callers_transaction(
    driver: Driver, database_url: str, keys: TokenKeys, own_table: None
) -> None:
    policy = policy_for_tests(keys)
    async with relay_to(database_url) as relay, app_connection(driver, relay.relayed_url) as app:
        await app.begin()
        await app.execute(own_insert("ada"))
        # The first on a connection may prepare its statement; the next ones run it.
        await app.request(user_id="first", email="first@example.com", policy=policy)
        before = relay.client_turns
        await app.request(user_id="ada", email="ada@example.com", policy=policy)
        turns = relay.client_turns - before
        await app.commit()
    assert turns == 1


async def test_anything_else_is_refused_naming_what_is_accepted() -> None:
    with pytest.raises(TypeError, match="asyncpg Connection, a psycopg AsyncConnection"):
        await notifier.request_verification(object(), user_id="u", email="u@example.com")
    with pytest.raises(TypeError, match="psycopg Connection, or a SQLAlchemy Connection"):
        notifier.request_verification_sync(object(), user_id="u", email="u@example.com")


async def test_a_sync_connection_given_to_the_async_call_is_pointed_to_the_sync_one(
    database_url: str,
) -> None:
    import psycopg

    conn: psycopg.Connection[tuple[object, ...]] = await anyio.to_thread.run_sync(
        lambda: psycopg.connect(database_url)
    )
    try:
        with pytest.raises(TypeError, match="use request_verification_sync"):
            await notifier.request_verification(conn, user_id="u", email="u@example.com")
    finally:
        await anyio.to_thread.run_sync(conn.close)
