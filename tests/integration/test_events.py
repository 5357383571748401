"""Events: every state change writes one event in the transaction that makes it, and only
then; thin payloads (no token, an address only redacted); the feed reads them in commit
order, resumable from a cursor with no gaps or repeats; NOTIFY notifier_events names each on
commit; cleanup forgets them (keeping those still owed to a webhook)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import anyio
import asyncpg
import orjson
import pytest

from notifier import event_types, events
from notifier.event_types import EVENT_TYPES
from notifier.redact import redact_email
from notifier.storage import event_feed
from notifier.storage.event_feed import START, Cursor
from notifier.storage.outbox import confirm
from notifier.tokens import TokenKeys
from tests.support.deliveries import enqueue, enqueue_many, link_token
from tests.support.recorder import Recorder
from tests.support.smtp_server import Fault, SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 15


async def events_of(db: asyncpg.Connection, verification_id: uuid.UUID) -> list[Any]:
    return await event_feed.events_of_verification(db, verification_id)


async def types_of(db: asyncpg.Connection, verification_id: uuid.UUID) -> list[str]:
    return [e.type for e in await events_of(db, verification_id)]


async def all_types(db: asyncpg.Connection) -> list[str]:
    return [r[0] for r in await db.fetch("SELECT type FROM notifier.events ORDER BY id")]


async def delivered(
    database_url: str, keys: TokenKeys, smtp_server: SmtpServer, count: int = 1
) -> None:
    recorder = Recorder()
    async with running_worker(database_url, keys, smtp_server.settings(), recorder=recorder):
        with anyio.fail_after(WAIT):
            await recorder.wait_for_kind(events.Completed, count)


async def test_a_request_writes_one_created_event_with_a_thin_payload(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = await enqueue(db, keys, "ada@example.com", user_id="ada")
    [event] = await events_of(db, made.id)
    assert event.type == "verification.created"
    assert event_types.is_event_id(event.id)
    assert event.data == {
        "verification_id": str(made.id),
        "user_id": "ada",
        "purpose": "signup",
        "client_id": None,
        "status": "pending",
    }


async def test_a_rolled_back_request_leaves_no_event(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    transaction = db.transaction()
    await transaction.start()
    await enqueue(db, keys, "ada@example.com")
    await transaction.rollback()
    assert await all_types(db) == []


async def test_a_delivery_the_mail_server_accepts_writes_one_sent_event(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    made = await enqueue(db, keys, "ada@example.com")
    await delivered(database_url, keys, smtp_server)
    assert await types_of(db, made.id) == ["verification.created", "verification.sent"]
    sent = (await events_of(db, made.id))[1]
    assert sent.data["status"] == "sent"
    assert sent.data["provider_message_id"] is not None


async def test_a_refused_address_writes_failed_rejected_and_suppressed_with_it_redacted(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("gone@example.com", Fault.RCPT_5XX)
    made = await enqueue(db, keys, "gone@example.com")
    await delivered(database_url, keys, smtp_server)
    by_type = {e.type: e for e in await events_of(db, made.id)}
    assert set(by_type) == {"verification.created", "verification.failed", "email.suppressed"}
    failed, suppressed = by_type["verification.failed"], by_type["email.suppressed"]
    assert failed.data["reason"] == "rejected"
    assert suppressed.data["email"] == redact_email("gone@example.com") == "g***@example.com"
    assert suppressed.data["verification_id"] == str(made.id)
    assert suppressed.data["smtp_code"] == 550


async def test_a_batch_of_deliveries_writes_one_sent_event_for_each(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    made = await enqueue_many(db, keys, 12)
    await delivered(database_url, keys, smtp_server, count=12)
    for one in made:
        assert await types_of(db, one.id) == ["verification.created", "verification.sent"]


async def test_two_refusals_of_one_address_in_one_batch_suppress_it_and_fail_both(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("gone@example.com", Fault.RCPT_5XX, Fault.RCPT_5XX)
    first = await enqueue(db, keys, "gone@example.com", user_id="a")
    second = await enqueue(db, keys, "gone@example.com", user_id="b")
    await delivered(database_url, keys, smtp_server, count=2)
    for one in (first, second):
        assert "verification.failed" in await types_of(db, one.id)
    assert (await all_types(db)).count("email.suppressed") >= 1


async def test_an_address_refused_again_after_its_suppression_lapsed_is_suppressed_again(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("gone@example.com", Fault.RCPT_5XX, Fault.RCPT_5XX)
    await enqueue(db, keys, "gone@example.com", user_id="a")
    await delivered(database_url, keys, smtp_server)
    await db.execute(
        "UPDATE notifier.suppressed_addresses SET expires_at = now() - interval '1 second'"
    )
    again = await enqueue(db, keys, "gone@example.com", user_id="b")
    await delivered(database_url, keys, smtp_server)
    assert await types_of(db, again.id) == [
        "verification.created",
        "verification.failed",
        "email.suppressed",
    ]
    assert (await all_types(db)).count("email.suppressed") == 2


async def test_confirming_writes_one_confirmed_event_however_often_the_link_is_pressed(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = await enqueue(db, keys, "ada@example.com")
    token = await link_token(db, keys, made.id)
    for _ in range(3):
        await confirm(db, token, apply=True, keys=keys)
    await confirm(db, token, apply=False, keys=keys)
    assert await types_of(db, made.id) == ["verification.created", "verification.confirmed"]
    assert (await events_of(db, made.id))[1].data["status"] == "verified"


async def test_a_newer_request_writes_superseded_for_the_older_naming_the_newer(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    older = await enqueue(db, keys, "ada@example.com", user_id="ada")
    newer = await enqueue(db, keys, "ada@example.com", user_id="ada")
    assert await types_of(db, older.id) == ["verification.created", "verification.superseded"]
    assert (await events_of(db, older.id))[1].data["superseded_by"] == str(newer.id)
    assert await types_of(db, newer.id) == ["verification.created"]


async def test_a_link_that_lapses_unconfirmed_writes_one_expired_event_when_swept(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = await enqueue(db, keys, "ada@example.com")
    live = await enqueue(db, keys, "grace@example.com")
    await db.execute(
        "UPDATE notifier.verifications SET expires_at = now() - interval '1 second' WHERE id = $1",
        made.id,
    )
    assert await event_feed.mark_lapsed(db, 100) == 1
    assert await event_feed.mark_lapsed(db, 100) == 0
    assert await types_of(db, made.id) == ["verification.created", "verification.expired"]
    assert await types_of(db, live.id) == ["verification.created"]


async def test_a_confirmed_link_never_lapses(db: asyncpg.Connection, keys: TokenKeys) -> None:
    made = await enqueue(db, keys, "ada@example.com")
    await confirm(db, await link_token(db, keys, made.id), apply=True, keys=keys)
    await db.execute(
        "UPDATE notifier.verifications SET expires_at = now() - interval '1 second' WHERE id = $1",
        made.id,
    )
    assert await event_feed.mark_lapsed(db, 100) == 0


async def test_every_type_the_schema_writes_is_in_the_vocabulary(db: asyncpg.Connection) -> None:
    # The triggers and the functions they run name the types the database writes.
    sources = await db.fetch(
        """SELECT pg_get_triggerdef(t.oid) AS source FROM pg_trigger t
           WHERE t.tgrelid::regclass::text LIKE 'notifier.%' AND NOT t.tgisinternal
           UNION ALL
           SELECT prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = 'notifier'"""
    )
    named = {
        m
        for row in sources
        for m in re.findall(r"'((?:verification|email)\.[a-z_]+)'", row["source"])
    }
    assert named == set(EVENT_TYPES)


async def test_every_function_that_turns_sequential_scans_off_turns_jit_off_too(
    db: asyncpg.Connection,
) -> None:
    # The event triggers run inside them; a scan costed as disabled would be JIT-compiled
    # on every call.
    settings = await db.fetch(
        """SELECT p.oid::regprocedure::text AS name, p.proconfig AS config FROM pg_proc p
           WHERE p.pronamespace = 'notifier'::regnamespace
             AND 'enable_seqscan=off' = ANY (p.proconfig)"""
    )
    assert settings
    assert [r["name"] for r in settings if "jit=off" not in r["config"]] == []


async def test_the_sql_redaction_is_the_logs_redaction(db: asyncpg.Connection) -> None:
    samples = ["bob@example.com", "a@b.c", "x", "@example.com", "a@b@example.com", "ünï@例え.jp"]
    for sample in samples:
        assert await db.fetchval("SELECT notifier.redacted_email_v1($1)", sample) == (
            redact_email(sample)
        )


# -- NOTIFY notifier_events ----------------------------------------------------------------


async def test_each_event_is_announced_on_notifier_events_at_commit(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    heard: list[str] = []
    arrived = anyio.Event()

    def on_event(*notification: Any) -> None:
        heard.append(notification[3])
        arrived.set()

    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener("notifier_events", on_event)
        async with db.transaction():
            made = await enqueue(db, keys, "ada@example.com")
            await anyio.sleep(0.2)
            assert heard == []  # nothing before the commit
        with anyio.fail_after(WAIT):
            await arrived.wait()
    finally:
        await listener.close()
    [event] = await events_of(db, made.id)
    assert heard == [event.id]


async def test_the_events_of_one_statement_are_named_in_order_in_a_few_notifications(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    made = await enqueue_many(db, keys, 450)
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - interval '1 second'")
    heard: list[str] = []
    all_heard = anyio.Event()

    def on_event(*notification: Any) -> None:
        heard.append(notification[3])
        if len(heard) == 3:
            all_heard.set()

    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener("notifier_events", on_event)
        assert await event_feed.mark_lapsed(db, 1000) == len(made)
        with anyio.fail_after(WAIT):
            await all_heard.wait()
    finally:
        await listener.close()
    expired = [
        r[0]
        for r in await db.fetch(
            "SELECT 'evt_' || replace(uid::text, '-', '') FROM notifier.events "
            "WHERE type = 'verification.expired' ORDER BY id"
        )
    ]
    assert [len(n.split(" ")) for n in heard] == [200, 200, 50]
    assert " ".join(heard).split(" ") == expired
    assert max(len(n.encode()) for n in heard) < 8000


# -- the feed --------------------------------------------------------------------------------


async def read_all(db: asyncpg.Connection, cursor: Cursor, page: int) -> tuple[list[str], Cursor]:
    """Everything the feed has after `cursor` now, page by page."""
    seen: list[str] = []
    while True:
        events_page = await event_feed.events_after(db, cursor, page)
        if not events_page:
            return seen, cursor
        seen += [e.id for e in events_page]
        assert events_page[-1].cursor is not None
        cursor = events_page[-1].cursor


async def read_until(
    db: asyncpg.Connection, cursor: Cursor, page: int, count: int
) -> tuple[list[str], Cursor]:
    """`read_all` until `count` events came: another writer anywhere in the cluster (the
    feed waits for every open transaction) may hold the newest back for a moment."""
    seen: list[str] = []
    with anyio.fail_after(WAIT):
        while len(seen) < count:
            more, cursor = await read_all(db, cursor, page)
            seen += more
            await anyio.sleep(0.01)
    return seen, cursor


async def test_a_reader_from_the_feeds_end_sees_only_events_committed_later(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    await enqueue(db, keys, "ada@example.com", user_id="ada")
    end = await event_feed.feed_end(db)
    later = await enqueue(db, keys, "bob@example.com", user_id="bob")
    seen, _ = await read_until(db, end, 100, 1)
    assert [e.id for e in await events_of(db, later.id)] == seen


async def every_event(db: asyncpg.Connection) -> list[str]:
    rows = await db.fetch(
        "SELECT 'evt_' || replace(uid::text, '-', '') FROM notifier.events ORDER BY id"
    )
    return [r[0] for r in rows]


async def test_the_feed_resumes_from_a_cursor_without_gaps_or_repeats(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    for i in range(7):
        await enqueue(db, keys, f"user{i}@example.com")
    first, cursor = await read_until(db, START, 3, 7)
    for i in range(7, 12):
        await enqueue(db, keys, f"user{i}@example.com")
    rest, cursor = await read_until(db, cursor, 2, 5)
    assert first + rest == await every_event(db)
    assert await read_all(db, cursor, 10) == ([], cursor)


async def test_the_feed_never_reads_past_a_transaction_still_open(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    early = await asyncpg.connect(database_url)
    try:
        # A transaction that wrote its event first, and commits last.
        slow = early.transaction()
        await slow.start()
        held = await enqueue(early, keys, "slow@example.com")
        await enqueue(db, keys, "quick@example.com")
        seen, cursor = await read_all(db, START, 10)
        assert seen == []  # the quick one committed, but after the open one's place
        await slow.commit()
    finally:
        await early.close()
    seen, _ = await read_until(db, cursor, 10, 2)
    assert seen[0] == (await events_of(db, held.id))[0].id
    assert seen == await every_event(db)


async def test_a_malformed_cursor_is_refused() -> None:
    for text in ("", "1", "1-", "-1", "a-b", "1-2-3", "99999999999999999999999-1"):
        with pytest.raises(ValueError):
            Cursor.parse(text)


# -- retention ---------------------------------------------------------------------------------


async def test_scrubbing_a_verification_redacts_the_user_id_its_events_carry(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = await enqueue(db, keys, "ada@example.com", user_id="ada-lovelace")
    await db.execute(
        """UPDATE notifier.email_outbox SET status = 'sent', completed_at = now() - interval
           '1 day' WHERE verification_id = $1""",
        made.id,
    )
    await db.execute(
        "UPDATE notifier.verifications SET expires_at = now() - interval '1 hour' WHERE id = $1",
        made.id,
    )
    assert await db.fetchval(_scrub(), 60.0, 10) == 1
    datas = [orjson.loads(r[0]) for r in await db.fetch("SELECT data FROM notifier.events")]
    assert {d["user_id"] for d in datas} == {"a***"}


def _scrub() -> str:
    from notifier.storage.queries import sql

    return sql("scrub_finished")


async def test_old_events_are_forgotten_but_not_one_still_owed_to_a_webhook(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    from notifier.storage.queries import sql

    await enqueue(db, keys, "ada@example.com")
    owed = await enqueue(db, keys, "grace@example.com")
    endpoint = await db.fetchval(
        """INSERT INTO notifier.webhook_endpoints (url, secret_key_id, secret_nonce)
           VALUES ('https://hooks.example.com/in', 'k', '\\x00112233445566778899aabbccddeeff')
           RETURNING id"""
    )
    await db.execute(
        """INSERT INTO notifier.webhook_deliveries (event_id, endpoint_id)
           SELECT id, $2 FROM notifier.events WHERE verification_id = $1""",
        owed.id,
        endpoint,
    )
    await db.execute("UPDATE notifier.events SET occurred_at = now() - interval '30 days'")
    assert await db.fetchval(sql("forget_events"), 86400.0, 100) == 1
    assert await types_of(db, owed.id) == ["verification.created"]
