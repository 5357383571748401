"""The worker end to end: real PostgreSQL, real SMTP server, real LISTEN/NOTIFY."""

from __future__ import annotations

import contextlib
import email
import email.policy
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator
from email.message import EmailMessage
from typing import Any

import anyio
import asyncpg
import pytest

from notifier import events
from notifier.delivery import shielded
from notifier.delivery import worker as worker_module
from notifier.delivery.leases import Leases
from notifier.delivery.listener import CHANNEL
from notifier.delivery.mailer import NullTransport
from notifier.delivery.worker import Worker
from notifier.storage.connection import Listening
from notifier.tokens import TokenKeys, hash_token
from tests.support.deliveries import (
    Enqueued,
    attempts_of,
    enqueue,
    enqueue_many,
    expire_lease,
    expire_verification,
    outbox_row,
)
from tests.support.recorder import Recorder, recorded
from tests.support.relay import Relay, relay_to
from tests.support.smtp_server import Fault, HoldAtRcpt, SlowData, SmtpServer
from tests.support.traffic import wait_until
from tests.support.workers import PUBLIC_URL, running_worker

pytestmark = pytest.mark.anyio

WAIT = 15  # seconds any single expectation may take before the test fails


def completed(worker: Worker, count: int) -> Any:
    return recorded(worker).wait_for(
        lambda s: len(s.of(events.Completed)) + len(s.of(events.Settled)) >= count
    )


def link_token(content: bytes) -> str:
    """The token in the plain-text part's link, decoded from its transfer encoding."""
    message = email.message_from_bytes(content, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    body = message.get_body(("plain",))
    assert body is not None
    text = body.get_content()
    match = re.search(re.escape(PUBLIC_URL) + r"/verify\?token=([A-Za-z0-9._-]+)", text)
    assert match, "no verification link in the message"
    return match.group(1)


def listening(worker: Worker) -> Listening:
    """The worker's LISTEN connection, which a started worker has."""
    connection = worker.listener.connection
    assert connection is not None, "the worker is not listening"
    return connection


async def statuses(db: asyncpg.Connection) -> Counter[str]:
    rows = await db.fetch("SELECT status FROM notifier.email_outbox")
    return Counter(r["status"] for r in rows)


async def test_notified_delivery_is_sent_with_its_stable_message_id_and_a_working_link(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        enqueued = await enqueue(db, keys, "reader@example.com")
        with anyio.fail_after(WAIT):
            await completed(worker, 1)
    [received] = smtp_server.received
    assert received.message_id == f"<verify.{enqueued.id}@notifier.test>"
    assert received.recipients == ["reader@example.com"]
    stored_hash = await db.fetchval(
        "SELECT token_hash FROM notifier.verifications WHERE id = $1", enqueued.id
    )
    assert hash_token(link_token(received.content)) == stored_hash
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"], row["discovered_by"]) == ("sent", 1, "notify")
    assert row["provider_message_id"].startswith("2.0.0 Ok: queued as")


async def test_the_raw_token_is_stored_nowhere_in_the_database(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        await enqueue(db, keys)
        with anyio.fail_after(WAIT):
            await completed(worker, 1)
    token = link_token(smtp_server.received[0].content)
    mac = token.partition(".")[2]
    for table in ("verifications", "email_outbox", "delivery_attempts"):
        dump = await db.fetchval(
            f"SELECT coalesce(string_agg(t::text, '|'), '') FROM notifier.{table} t"
        )
        assert mac not in dump, table


async def test_two_workers_racing_over_1000_rows_never_both_send_one_row(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp = smtp_server.settings(pool_size=8)
    shared = Recorder()
    async with (
        running_worker(database_url, keys, smtp, name="a", recorder=shared) as a,
        running_worker(database_url, keys, smtp, name="b", recorder=shared) as b,
    ):
        # Enqueued while both listen, so both are told about every row and race for each.
        for start in range(0, 1000, 100):
            await enqueue_many(db, keys, 100, prefix=f"race{start}-")
        with anyio.fail_after(60):
            await shared.wait_for_kind(events.Completed, 1000)
    assert await statuses(db) == Counter(sent=1000)
    ids = Counter(r.message_id for r in smtp_server.received)
    assert len(ids) == 1000
    assert max(ids.values()) == 1, [m for m, n in ids.items() if n > 1]
    owners = await db.fetch("SELECT DISTINCT lease_owner FROM notifier.delivery_attempts")
    assert {r["lease_owner"] for r in owners} == {a.owner, b.owner}  # both really worked


async def test_with_notifications_off_the_poll_alone_delivers_everything(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(
        database_url, keys, smtp_server.settings(), mode="poll", poll_interval=0.1
    ) as worker:
        await enqueue_many(db, keys, 20)
        with anyio.fail_after(WAIT):
            await completed(worker, 20)
    assert worker.listener.connection is None  # no LISTEN at all
    assert await statuses(db) == Counter(sent=20)
    found = await db.fetch("SELECT DISTINCT discovered_by FROM notifier.email_outbox")
    assert [r["discovered_by"] for r in found] == ["poll"]


async def test_without_the_trigger_the_sweep_alone_delivers_everything(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    await db.execute("ALTER TABLE notifier.email_outbox DISABLE TRIGGER email_outbox_notify_v1")
    async with running_worker(
        database_url, keys, smtp_server.settings(), sweep_interval=0.2
    ) as worker:
        await enqueue_many(db, keys, 20)
        with anyio.fail_after(WAIT):
            await completed(worker, 20)
    assert await statuses(db) == Counter(sent=20)
    found = await db.fetch("SELECT DISTINCT discovered_by FROM notifier.email_outbox")
    assert [r["discovered_by"] for r in found] == ["sweep"]


async def test_killed_listener_reconnects_sweeps_and_loses_nothing(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        pid = listening(worker).get_server_pid()
        await db.execute("SELECT pg_terminate_backend($1)", pid)
        # Committed while nobody listens: these notifications are gone for good.
        await enqueue_many(db, keys, 10, prefix="missed")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.ListenerConnected, 2)
            await completed(worker, 10)
        assert listening(worker).get_server_pid() != pid
    assert recorded(worker).of(events.ListenerLost)
    assert await statuses(db) == Counter(sent=10)


async def test_silent_listener_is_detected_by_its_round_trip_and_replaced(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        # What a transaction-mode pooler does: the session looks fine but hears nothing.
        await listening(worker).execute(f"UNLISTEN {CHANNEL}")
        with anyio.fail_after(WAIT):
            [lost] = await recorded(worker).wait_for_kind(events.ListenerLost)
            await recorded(worker).wait_for_kind(events.ListenerConnected, 2)
        assert "self-notification" in lost.reason
        enqueued = await enqueue(db, keys)
        with anyio.fail_after(WAIT):
            await completed(worker, 1)
    assert (await outbox_row(db, enqueued.outbox_id))["status"] == "sent"


async def test_malformed_payloads_are_ignored_and_listening_goes_on(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        for junk in ("not json", '{"v": 1, "ids": ["x"]}', '{"v": 9}', ""):
            await db.execute("SELECT pg_notify($1, $2)", CHANNEL, junk)
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.MalformedPayload, 4)
        await enqueue(db, keys)
        with anyio.fail_after(WAIT):
            await completed(worker, 1)
    assert recorded(worker).of(events.ListenerLost) == []


async def test_transient_replies_are_retried_with_backoff_until_sent(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("flaky@example.com", Fault.RCPT_4XX, Fault.DATA_4XX)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        enqueued = await enqueue(db, keys, "flaky@example.com")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(
                lambda s: any(e.status == "sent" for e in s.of(events.Completed))
            )
    attempts = await attempts_of(db, enqueued.outbox_id)
    assert [(a["attempt"], a["outcome"], a["smtp_code"]) for a in attempts] == [
        (1, "transient", 451),
        (2, "transient", 451),
        (3, "sent", 250),
    ]
    # Retries are claimed by the worker's own timer the moment they come due.
    assert [a["discovered_by"] for a in attempts] == ["notify", "retry_timer", "retry_timer"]


async def test_permanent_reply_fails_at_once_and_is_never_retried(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("gone@example.com", Fault.RCPT_5XX)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        enqueued = await enqueue(db, keys, "gone@example.com")
        with anyio.fail_after(WAIT):
            await completed(worker, 1)
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"]) == ("failed", 1)
    assert row["last_error"].startswith("550 5.1.1")
    assert "gone@example.com" not in row["last_error"]  # safe to show: redacted


async def test_a_permanently_refused_address_is_suppressed(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("nobody@example.com", Fault.RCPT_5XX)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        enqueued = await enqueue(db, keys, "nobody@example.com")
        with anyio.fail_after(WAIT):
            await completed(worker, 1)
    row = await db.fetchrow("SELECT * FROM notifier.suppressed_addresses")
    assert (row["email"], row["smtp_code"], row["outbox_id"]) == (
        "nobody@example.com",
        550,
        enqueued.outbox_id,
    )


async def test_retries_stop_at_max_attempts(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("busy@example.com", *[Fault.RCPT_4XX] * 5)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        enqueued = await enqueue(db, keys, "busy@example.com", max_attempts=3)
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(
                lambda s: any(e.status == "failed" for e in s.of(events.Completed))
            )
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"]) == ("failed", 3)
    assert len(await attempts_of(db, enqueued.outbox_id)) == 3


async def test_unknown_outcome_is_retried_under_the_same_message_id(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("maybe@example.com", Fault.DROP_AFTER_DATA)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        enqueued = await enqueue(db, keys, "maybe@example.com")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(
                lambda s: any(e.status == "sent" for e in s.of(events.Completed))
            )
    copies = smtp_server.kept
    assert len(copies) == 2 and copies[0].message_id == copies[1].message_id
    attempts = await attempts_of(db, enqueued.outbox_id)
    assert [(a["outcome"], a["body_sent"]) for a in attempts] == [("unknown", True), ("sent", True)]
    assert (await outbox_row(db, enqueued.outbox_id))["unknown_outcomes"] == 1


async def test_expired_verification_is_never_sent(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    enqueued = await enqueue(db, keys)
    await expire_verification(db, enqueued.outbox_id)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Settled)
    assert smtp_server.received == []
    assert (await outbox_row(db, enqueued.outbox_id))["status"] == "expired"


async def test_an_old_retry_that_comes_due_after_expiry_is_never_sent(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("late@example.com", Fault.RCPT_4XX)
    async with running_worker(
        database_url, keys, smtp_server.settings(), retry_base=1.0, retry_ceiling=1.0
    ) as worker:
        enqueued = await enqueue(db, keys, "late@example.com")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Completed)
        await expire_verification(db, enqueued.outbox_id)
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Settled)
    assert smtp_server.received == []  # the 4xx came at RCPT: no body ever went out
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"]) == ("expired", 1)


async def test_superseded_verification_is_never_sent(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    enqueued = await enqueue(db, keys)
    await db.execute(
        "UPDATE notifier.verifications SET superseded_at = now() WHERE id = $1", enqueued.id
    )
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Settled)
    assert smtp_server.received == []
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["last_outcome"]) == ("expired", "superseded")


async def test_link_too_close_to_expiry_at_data_is_not_sent(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    hold = HoldAtRcpt()
    smtp_server.plan("edge@example.com", hold)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        enqueued = await enqueue(db, keys, "edge@example.com", ttl_seconds=3.0)
        await hold.wait_reached()  # claimed while live, envelope under way, body not yet sent
        left = await db.fetchval(
            "SELECT extract(epoch FROM expires_at - now()) FROM notifier.verifications "
            "WHERE id = $1",
            enqueued.id,
        )
        # By the database's clock, less than the one-second margin is left at DATA.
        await anyio.sleep(float(left) - 0.8)
        hold.release.set()
        with anyio.fail_after(WAIT):
            await completed(worker, 1)
    assert smtp_server.received == []
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["last_outcome"]) == ("expired", "expired")


async def test_a_fresh_claim_superseded_during_its_envelope_still_sends_without_asking_again(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    # The documented trade: between a fresh claim and DATA the SMTP connection never waits
    # on the database, so a newer link requested in those milliseconds does not stop this
    # one (its link then says "superseded"; the newer mail follows).
    hold = HoldAtRcpt()
    smtp_server.plan("fresh@example.com", hold)
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        enqueued = await enqueue(db, keys, "fresh@example.com")
        await hold.wait_reached()
        await db.execute(
            "UPDATE notifier.verifications SET superseded_at = now() WHERE id = $1", enqueued.id
        )
        hold.release.set()
        with anyio.fail_after(WAIT):
            await completed(worker, 1)
    assert len(smtp_server.received) == 1
    assert (await outbox_row(db, enqueued.outbox_id))["status"] == "sent"


async def test_a_claim_that_waited_for_a_connection_is_checked_before_mail_from(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    first, later = HoldAtRcpt(), "later@example.com"
    smtp_server.plan("first@example.com", first)
    smtp = smtp_server.settings(pool_size=1)
    # Two sends in flight over one connection: the second claim waits, and ages past a
    # tenth of its two-second lease before it can start.
    async with running_worker(database_url, keys, smtp, concurrency=2, lease_seconds=2.0) as worker:
        await enqueue(db, keys, "first@example.com")
        await first.wait_reached()
        waiting = await enqueue(db, keys, later)
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(lambda s: len(s.of(events.Claimed)) == 2)
        await db.execute(
            "UPDATE notifier.verifications SET verified_at = now() WHERE id = $1", waiting.id
        )
        await anyio.sleep(0.3)
        first.release.set()
        with anyio.fail_after(WAIT):
            await completed(worker, 2)
    assert [m.recipients for m in smtp_server.received] == [["first@example.com"]]
    row = await outbox_row(db, waiting.outbox_id)
    # Settled as sent: the person confirmed with an earlier email.
    assert (row["status"], row["last_outcome"]) == ("sent", "verified")
    [attempt] = await attempts_of(db, waiting.outbox_id)
    assert attempt["body_sent"] is False


async def test_a_claim_that_waited_and_is_still_live_is_sent_after_its_check(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    first = HoldAtRcpt()
    smtp_server.plan("first@example.com", first)
    smtp = smtp_server.settings(pool_size=1)
    async with running_worker(database_url, keys, smtp, concurrency=2, lease_seconds=2.0) as worker:
        await enqueue(db, keys, "first@example.com")
        await first.wait_reached()
        await enqueue(db, keys, "later@example.com")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(lambda s: len(s.of(events.Claimed)) == 2)
        await anyio.sleep(0.3)
        first.release.set()
        with anyio.fail_after(WAIT):
            await completed(worker, 2)
    assert sorted(m.recipients[0] for m in smtp_server.received) == [
        "first@example.com",
        "later@example.com",
    ]


async def test_more_sends_in_flight_than_smtp_connections_is_warned_about(
    database_url: str, keys: TokenKeys, smtp_server: SmtpServer, caplog: pytest.LogCaptureFixture
) -> None:
    smtp = smtp_server.settings(pool_size=2)
    with caplog.at_level(logging.WARNING, logger="notifier.delivery.worker"):
        async with running_worker(database_url, keys, smtp, concurrency=4):
            pass
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "NOTIFIER_CONCURRENCY=4" in warning and "2 SMTP connections" in warning


async def test_lease_renewal_keeps_a_slow_send_owned(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("slow@example.com", SlowData(3.0))  # three one-second leases long
    smtp = smtp_server.settings(data_timeout=10.0)
    shared = Recorder()
    async with (
        running_worker(database_url, keys, smtp, name="a", recorder=shared, lease_seconds=1.0),
        # Sweeping constantly, either would take the row the moment the other's lease ran out.
        running_worker(
            database_url,
            keys,
            smtp,
            name="b",
            recorder=shared,
            lease_seconds=1.0,
            sweep_interval=0.05,
        ),
    ):
        enqueued = await enqueue(db, keys, "slow@example.com")
        with anyio.fail_after(WAIT):
            [done] = await shared.wait_for_kind(events.Completed)
    assert len(smtp_server.received) == 1
    attempts = await attempts_of(db, enqueued.outbox_id)
    assert [(r["outcome"], r["lease_held"], r["lease_owner"]) for r in attempts] == [
        ("sent", True, done.owner)
    ]
    assert [e.owner for e in shared.of(events.Claimed)] == [done.owner]
    assert shared.of(events.LeaseLost) == []


async def test_clean_shutdown_finishes_sends_in_flight_and_leaves_no_lease(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    for n in range(3):
        smtp_server.plan(f"inflight{n}@example.com", SlowData(1.0))
    async with running_worker(database_url, keys, smtp_server.settings(pool_size=3)) as worker:
        async with db.transaction():
            for n in range(3):
                await enqueue(db, keys, f"inflight{n}@example.com", user_id=f"u{n}")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(lambda s: worker.in_flight == 3)
        worker.stop()
    assert await statuses(db) == Counter(sent=3)
    assert len(smtp_server.kept) == 3


async def test_shutdown_past_its_grace_releases_unsent_rows_uncounted(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    hold = HoldAtRcpt()
    smtp_server.plan("stuck@example.com", hold)
    async with running_worker(
        database_url, keys, smtp_server.settings(), shutdown_grace=0.2
    ) as worker:
        enqueued = await enqueue(db, keys, "stuck@example.com")
        await hold.wait_reached()
        worker.stop()
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Released)
    hold.release.set()
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"], row["lease_token"]) == ("pending", 0, None)
    assert smtp_server.received == []
    assert (
        await db.fetchval("SELECT count(*) FROM notifier.email_outbox WHERE status = 'sending'")
        == 0
    )


@contextlib.asynccontextmanager
async def worker_behind_a_relay(
    database_url: str, keys: TokenKeys, smtp_server: SmtpServer, **overrides: Any
) -> AsyncIterator[tuple[Worker, Relay]]:
    """A worker whose pool reaches the database through a relay the test controls (its
    LISTEN goes direct)."""
    async with (
        relay_to(database_url) as relay,
        running_worker(
            database_url,
            keys,
            smtp_server.settings(),
            pool_url=relay.relayed_url,
            # The listener's health check would otherwise take pool connections the relay
            # holds up: the pool's one idle connection is left for the claim.
            listener_check_interval=60.0,
            **overrides,
        ) as worker,
    ):
        yield worker, relay


async def claimed_but_unanswered(
    db: asyncpg.Connection, keys: TokenKeys, worker: Worker, relay: Relay, email: str
) -> Enqueued:
    """A row the worker's claim has committed on the server, its answer held in the relay."""
    # One delivery first, so the claim is a prepared statement: one message each way.
    await enqueue(db, keys, "early@example.com")
    with anyio.fail_after(WAIT):
        await completed(worker, 1)
    relay.hold()
    enqueued = await enqueue(db, keys, email, user_id=email)

    async def leased() -> bool:
        return bool((await outbox_row(db, enqueued.outbox_id))["status"] == "sending")

    await wait_until(leased, WAIT, "the claim committed on the server")
    return enqueued


async def test_a_claim_answered_after_shutdown_began_hands_its_rows_back_uncounted(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    # stop() arrives while the claim's answer is on its way: the worker must still learn of
    # the rows it holds, or they stay leased after it exits (invariant 7).
    async with worker_behind_a_relay(database_url, keys, smtp_server) as (worker, relay):
        enqueued = await claimed_but_unanswered(db, keys, worker, relay, "late@example.com")
        worker.stop()
        await anyio.sleep(0.2)  # the stop reaches the claimer while the answer is held
        relay.flow()
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Released)
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"], row["lease_token"]) == ("pending", 0, None)
    assert [r.recipients for r in smtp_server.received] == [["early@example.com"]]


async def test_a_claim_whose_answer_was_lost_is_handed_back_before_a_clean_exit(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    # The connection drops before the answer arrives: the worker holds a lease it never
    # saw. Its last look before exiting finds and releases it.
    async with worker_behind_a_relay(database_url, keys, smtp_server) as (worker, relay):
        enqueued = await claimed_but_unanswered(db, keys, worker, relay, "orphan@example.com")
        relay.cut()
        relay.flow()
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.ClaimFailed)
        relay.restore()
    assert [e.id for e in recorded(worker).of(events.Released)] == [enqueued.outbox_id]
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"], row["lease_token"]) == ("pending", 0, None)
    assert [r.recipients for r in smtp_server.received] == [["early@example.com"]]


async def test_a_claim_the_database_never_answers_holds_shutdown_only_for_the_cleanup_bound(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_module, "CLEANUP_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(shielded, "CLEANUP_TIMEOUT_SECONDS", 0.5)
    async with worker_behind_a_relay(database_url, keys, smtp_server) as (worker, relay):
        enqueued = await claimed_but_unanswered(db, keys, worker, relay, "none@example.com")
        worker.stop()
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.WorkerStopped)
        relay.flow()
    # Nothing answered, so nothing could be handed back: the lease expires on its own.
    row = await outbox_row(db, enqueued.outbox_id)
    assert row["status"] == "sending"
    assert [r.recipients for r in smtp_server.received] == [["early@example.com"]]


async def test_a_release_that_meets_a_database_outage_is_retried_until_it_lands(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    hold = HoldAtRcpt()
    smtp_server.plan("stuck@example.com", hold)
    async with worker_behind_a_relay(database_url, keys, smtp_server, shutdown_grace=0.2) as (
        worker,
        relay,
    ):
        enqueued = await enqueue(db, keys, "stuck@example.com")
        await hold.wait_reached()
        relay.cut()  # the database goes away just as shutdown begins
        worker.stop()
        await anyio.sleep(1.0)  # past the grace: the first tries to release have failed
        relay.restore()
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.Released)
    hold.release.set()
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"], row["lease_token"]) == ("pending", 0, None)
    assert smtp_server.received == []


async def test_worker_that_lost_its_lease_before_the_body_abandons_the_send(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    hold = HoldAtRcpt()
    smtp_server.plan("lost@example.com", hold)
    async with running_worker(
        database_url, keys, smtp_server.settings(), lease_seconds=1.0
    ) as worker:
        enqueued = await enqueue(db, keys, "lost@example.com")
        await hold.wait_reached()
        # As if the worker had stalled past its lease: the lease runs out, a rival takes the
        # row, and the worker's next renewal finds it gone.
        await expire_lease(db, enqueued.outbox_id)
        rival = Leases(db, "test:rival", 30.0)
        [taken] = await rival.claim_ids([enqueued.outbox_id], "sweep")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.LeaseLost)
        hold.release.set()
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for_kind(events.StaleCompletion)
    assert smtp_server.received == []
    attempts = await attempts_of(db, enqueued.outbox_id)
    # The rival's claim recorded the expired lease; the worker's own ending changed nothing.
    assert [(a["outcome"], a["body_sent"], a["lease_held"]) for a in attempts] == [
        ("lease_expired", False, True),
        ("lease_lost", False, False),
    ]
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["lease_token"]) == ("sending", taken.lease_token)


async def test_stale_worker_completion_changes_nothing_and_is_recorded(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("twice@example.com", SlowData(1.5))
    smtp = smtp_server.settings(data_timeout=10.0)
    shared = Recorder()
    async with running_worker(database_url, keys, smtp, name="a", recorder=shared) as a:
        enqueued = await enqueue(db, keys, "twice@example.com")
        with anyio.fail_after(WAIT):
            await smtp_server.wait_for(1)  # a's body is out; its reply is slow
        await expire_lease(db, enqueued.outbox_id)
        async with running_worker(
            database_url, keys, smtp, name="b", recorder=shared, sweep_interval=0.05
        ) as b:
            with anyio.fail_after(WAIT):
                await shared.wait_for(
                    lambda s: bool(s.of(events.StaleCompletion)) and bool(s.of(events.Completed))
                )
    [stale] = shared.of(events.StaleCompletion)
    [done] = shared.of(events.Completed)
    assert (stale.outcome, done.owner) == ("sent", b.owner)
    attempts = await attempts_of(db, enqueued.outbox_id)
    assert sorted((r["lease_owner"], r["outcome"], r["lease_held"]) for r in attempts) == sorted(
        [(a.owner, "lease_expired", True), (b.owner, "sent", True), (a.owner, "sent", False)]
    )
    row = await outbox_row(db, enqueued.outbox_id)
    assert (row["status"], row["attempts"]) == ("sent", 2)


async def stalled(holds: list[HoldAtRcpt], count: int) -> None:
    """Until `count` of `holds` have an attempt stalled at RCPT TO."""

    async def enough() -> bool:
        return sum(h.reached.is_set() for h in holds) >= count

    await wait_until(enough, WAIT, f"{count} sends stalled at RCPT")


async def test_a_domain_that_stalls_holds_only_its_share_of_the_send_slots(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    # A tarpit: every attempt to its recipients stalls at RCPT until the test lets it go.
    holds = [HoldAtRcpt() for _ in range(8)]
    for n, hold in enumerate(holds):
        smtp_server.plan(f"t{n}@tarpit.example", hold)
    smtp = smtp_server.settings(pool_size=8)
    async with running_worker(database_url, keys, smtp, concurrency=8) as worker:
        for n in range(8):
            await enqueue(db, keys, f"t{n}@tarpit.example")
        await stalled(holds, 1)
        for n in range(10):
            await enqueue(db, keys, f"o{n}@example.com")
        # Ordinary mail goes out while the tarpit's send is still stalled; a domain nobody
        # has seen send quickly gets one place, and its other rows wait without a slot.
        with anyio.fail_after(WAIT):
            await smtp_server.wait_for(10)
        assert sum(h.reached.is_set() for h in holds) == 1
        for hold in holds:
            hold.release.set()
        with anyio.fail_after(WAIT):
            await completed(worker, 18)
    assert await statuses(db) == Counter(sent=18)


async def test_rows_waiting_for_their_domain_are_handed_its_places_as_its_sends_end(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    hold = HoldAtRcpt()
    smtp_server.plan("busy@example.com", hold)
    smtp = smtp_server.settings(pool_size=4)
    async with running_worker(database_url, keys, smtp, concurrency=4) as worker:
        await enqueue(db, keys, "busy@example.com")
        await stalled([hold], 1)
        for n in range(6):
            await enqueue(db, keys, f"next{n}@example.com")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(lambda s: len(s.of(events.Claimed)) == 7)
        # Claimed, waiting for a place of their domain: nothing of theirs reached the server.
        assert smtp_server.received == []
        hold.release.set()
        with anyio.fail_after(WAIT):
            await completed(worker, 7)
    assert await statuses(db) == Counter(sent=7)
    # Handed the places directly: none went back to the database to wait.
    assert not recorded(worker).of(events.Deferred)


async def test_no_row_waiting_for_its_domain_is_stranded_when_its_sends_end_first(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    # Rows to one domain in bursts, sent at once: a send of the domain often ends between a
    # row being put in line and its task starting; that row must still get the place.
    async with running_worker(
        database_url, keys, transport=NullTransport(), concurrency=2, domain_concurrency=1
    ) as worker:
        total = 0
        for burst in (1, 2, 3, 5, 8, 1, 2, 3, 5, 8, 13, 1, 1, 2):
            async with db.transaction():
                for _ in range(burst):
                    await enqueue(db, keys, f"r{total}@one.example")
                    total += 1
        with anyio.fail_after(WAIT):
            await completed(worker, total)
    assert await statuses(db) == Counter(sent=total)


async def test_a_backlog_is_claimed_beyond_the_free_slots_and_waits_here_for_them(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    # Two slots: the first claim takes the two rows it can send and as many again, which
    # wait here for a slot (a claim per batch, not per freed slot); the rest stay queued.
    addresses = [f"queued{n}@d{n}.example.com" for n in range(6)]
    for address in addresses:
        smtp_server.plan(address, SlowData(0.5))
    async with db.transaction():
        for n, address in enumerate(addresses):
            await enqueue(db, keys, address, user_id=f"u{n}")
    settings = smtp_server.settings(pool_size=2)
    peak = 0
    async with running_worker(database_url, keys, settings, concurrency=2) as worker:
        with anyio.fail_after(WAIT):
            while len(smtp_server.kept) < len(addresses):
                peak = max(peak, worker.in_flight)
                await anyio.sleep(0.01)
    assert peak == 4
    assert smtp_server.peak_open_connections <= 2
    assert await statuses(db) == Counter(sent=6)
