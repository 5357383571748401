"""Webhooks: every event goes to each subscribed endpoint at least once, signed as Standard
Webhooks v1 says (checked by the spec's own library in a real receiver), under the same lease
rules as email: retried on failure with one webhook-id, duplicated only after an unknown
outcome, disabled on 410, throttled by Retry-After, dead after the schedule and replayable;
and never to an address the SSRF rules refuse, which is refused before any connection."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import asyncpg
import pytest

from notifier import events
from notifier.event_types import event_id
from notifier.storage import webhooks
from notifier.storage.outbox import confirm
from notifier.tokens import TokenKeys
from tests.support.deliveries import enqueue, link_token
from tests.support.recorder import Recorder
from tests.support.smtp_server import SmtpServer
from tests.support.webhook_receiver import Answer, Receiver, receiving
from tests.support.workers import running_webhooks, running_worker

pytestmark = pytest.mark.anyio

WAIT = 15


async def register(
    db: asyncpg.Connection, keys: TokenKeys, receiver: Receiver, **kwargs: Any
) -> webhooks.Endpoint:
    endpoint, secret = await webhooks.add(db, keys, receiver.url, allow_private=True, **kwargs)
    receiver.secrets.append(secret)
    return endpoint


async def delivery_row(db: asyncpg.Connection) -> Any:
    return await db.fetchrow("SELECT * FROM notifier.webhook_deliveries ORDER BY id LIMIT 1")


async def attempt_outcomes(db: asyncpg.Connection) -> list[str]:
    rows = await db.fetch("SELECT outcome FROM notifier.webhook_attempts ORDER BY id")
    return [r[0] for r in rows]


async def settled(recorder: Recorder, count: int = 1) -> list[events.WebhookAttempted]:
    with anyio.fail_after(WAIT):
        await recorder.wait_for(
            lambda r: (
                sum(e.status in ("delivered", "dead") for e in r.of(events.WebhookAttempted))
                >= count
            )
        )
    return recorder.of(events.WebhookAttempted)


async def test_an_event_is_delivered_once_signed_by_the_standard_and_named_by_its_id(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with receiving() as receiver, running_webhooks(database_url, keys, recorder=recorder):
        secret_holder = await register(db, keys, receiver)
        made = await enqueue(db, keys, "ada@example.com", user_id="ada")
        [got] = await receiver.wait_for(1)
        await settled(recorder)
    [event] = await db.fetch("SELECT uid, occurred_at FROM notifier.events")
    assert got.webhook_id == event_id(event["uid"])
    assert got.verified_by == receiver.secrets  # the spec's library accepts our signature
    assert got.json["type"] == "verification.created"
    assert got.json["data"] == {
        "verification_id": str(made.id),
        "user_id": "ada",
        "purpose": "signup",
        "client_id": None,
        "status": "pending",
    }
    assert str(got.json["timestamp"]).endswith("Z")
    assert got.headers["content-type"] == "application/json"
    row = await delivery_row(db)
    assert (row["status"], row["attempts"], row["endpoint_id"]) == (
        "delivered", 1, secret_holder.id
    )  # fmt: skip
    assert await attempt_outcomes(db) == ["delivered"]


async def test_a_receiver_that_fails_then_succeeds_gets_the_same_webhook_id_again(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with receiving() as receiver, running_webhooks(database_url, keys, recorder=recorder):
        await register(db, keys, receiver)
        receiver.plan(Answer(500, body=b"database down"))
        await enqueue(db, keys, "ada@example.com")
        first, second = await receiver.wait_for(2)
        await settled(recorder)
    assert first.webhook_id == second.webhook_id
    assert await attempt_outcomes(db) == ["failed", "delivered"]
    details = await db.fetchval(
        "SELECT detail FROM notifier.webhook_attempts WHERE outcome = 'failed'"
    )
    assert details == "HTTP 500: database down"


async def test_a_410_disables_the_endpoint_and_no_more_deliveries_are_made_for_it(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with receiving() as receiver, running_webhooks(database_url, keys, recorder=recorder):
        endpoint = await register(db, keys, receiver)
        receiver.plan(Answer(410))
        await enqueue(db, keys, "ada@example.com")
        await settled(recorder)
        await enqueue(db, keys, "grace@example.com")
    [listed] = await webhooks.listing(db)
    assert listed.disabled_reason == "the endpoint answered 410 Gone"
    assert (await delivery_row(db))["status"] == "dead"
    assert await db.fetchval("SELECT count(*) FROM notifier.webhook_deliveries") == 1
    assert [e.endpoint_id for e in recorder.of(events.WebhookEndpointDisabled)] == [endpoint.id]


async def test_a_429_is_retried_no_sooner_than_its_retry_after(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with receiving() as receiver, running_webhooks(database_url, keys, recorder=recorder):
        await register(db, keys, receiver)
        receiver.plan(Answer(429, headers=(("Retry-After", "1"),)))
        await enqueue(db, keys, "ada@example.com")
        await receiver.wait_for(1)
        with anyio.fail_after(WAIT):
            await recorder.wait_for_kind(events.WebhookAttempted)
        due = await db.fetchval(
            "SELECT extract(epoch FROM next_attempt_at - updated_at) "
            "FROM notifier.webhook_deliveries"
        )
        await settled(recorder)
    assert float(due) == pytest.approx(1.0, abs=0.05)
    assert await attempt_outcomes(db) == ["throttled", "delivered"]


async def test_a_receiver_that_hangs_times_out_as_unknown_and_is_sent_again(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with (
        receiving() as receiver,
        running_webhooks(database_url, keys, recorder=recorder, timeout=0.3),
    ):
        await register(db, keys, receiver)
        receiver.plan(Answer(hang=True))
        await enqueue(db, keys, "ada@example.com")
        first, second = await receiver.wait_for(2)
        await settled(recorder)
    assert first.webhook_id == second.webhook_id  # a duplicate the receiver can drop
    assert await attempt_outcomes(db) == ["unknown", "delivered"]
    row = await delivery_row(db)
    assert (row["status"], row["unknown_outcomes"]) == ("delivered", 1)


async def test_a_redirect_is_a_failure_and_never_followed(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with receiving() as receiver, running_webhooks(database_url, keys, recorder=recorder):
        await register(db, keys, receiver)
        receiver.plan(Answer(302, headers=(("Location", "http://127.0.0.1:1/elsewhere"),)))
        await enqueue(db, keys, "ada@example.com")
        await receiver.wait_for(2)
        await settled(recorder)
    assert await attempt_outcomes(db) == ["failed", "delivered"]


async def test_after_the_schedule_a_delivery_is_dead_and_a_replay_delivers_it(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with (
        receiving() as receiver,
        running_webhooks(database_url, keys, recorder=recorder, retry_schedule=(0.05,)),
    ):
        await register(db, keys, receiver)
        receiver.plan(Answer(500), Answer(502))
        await enqueue(db, keys, "ada@example.com")
        await settled(recorder)
        row = await delivery_row(db)
        assert (row["status"], row["attempts"]) == ("dead", 2)
        assert await webhooks.replay(db, row["id"])
        assert not await webhooks.replay(db, row["id"])  # not dead any more
        await settled(recorder, 2)
    assert [r.webhook_id for r in receiver.received] == [receiver.received[0].webhook_id] * 3
    assert (await delivery_row(db))["status"] == "delivered"


async def test_an_endpoint_failing_for_longer_than_allowed_is_disabled(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with receiving() as receiver:
        async with running_webhooks(database_url, keys, recorder=recorder, disable_after=60.0):
            await register(db, keys, receiver)
            await db.execute(
                "UPDATE notifier.webhook_endpoints SET failing_since = now() - interval '2 minutes'"
            )
            receiver.plan(Answer(500))
            await enqueue(db, keys, "ada@example.com")
            with anyio.fail_after(WAIT):
                await recorder.wait_for_kind(events.WebhookEndpointDisabled)
        [listed] = await webhooks.listing(db)
        assert listed.disabled_reason is not None
        assert listed.disabled_reason.startswith("every delivery failed since ")
        # Waiting, not lost: enabling it again sends what it missed.
        assert listed.pending == 1
        async with running_webhooks(database_url, keys, recorder=recorder):
            await webhooks.enable(db, listed.id)
            await receiver.wait_for(2)
            await settled(recorder)


async def test_an_endpoint_only_gets_the_types_it_subscribed_to(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with receiving() as receiver, running_webhooks(database_url, keys, recorder=recorder):
        await register(db, keys, receiver, event_types=["verification.confirmed"])
        made = await enqueue(db, keys, "ada@example.com")
        await confirm(db, await link_token(db, keys, made.id), apply=True, keys=keys)
        [got] = await receiver.wait_for(1)
        await settled(recorder)
    assert got.json["type"] == "verification.confirmed"
    assert await db.fetchval("SELECT count(*) FROM notifier.webhook_deliveries") == 1


async def test_after_a_rotation_both_secrets_sign_until_the_old_one_lapses(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with receiving() as receiver, running_webhooks(database_url, keys, recorder=recorder):
        endpoint = await register(db, keys, receiver)
        new, _ = await webhooks.rotate(db, keys, endpoint.id, overlap=3600)
        receiver.secrets.append(new)
        await enqueue(db, keys, "ada@example.com")
        [during] = await receiver.wait_for(1)
        await db.execute("UPDATE notifier.webhook_endpoints SET previous_until = now()")
        await enqueue(db, keys, "grace@example.com")
        _, after = await receiver.wait_for(2)
        await settled(recorder, 2)
    old = receiver.secrets[0]
    assert len(during.signature.split(" ")) == 2
    assert during.verified_by == [old, new]
    assert after.verified_by == [new]


async def test_a_slow_receiver_never_delays_an_email(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    email = Recorder()
    async with (
        receiving() as receiver,
        running_webhooks(database_url, keys, concurrency=1, timeout=10.0),
        running_worker(database_url, keys, smtp_server.settings(), recorder=email),
    ):
        await register(db, keys, receiver)
        receiver.plan(*[Answer(hang=True)] * 3)
        for name in ("ada", "grace", "hedy"):
            await enqueue(db, keys, f"{name}@example.com")
        with anyio.fail_after(WAIT):
            await email.wait_for_kind(events.Completed, 3)
        # Every email went while the first webhook still hung (the sender's one slot).
        assert len(receiver.received) == 1
        await db.execute("DELETE FROM notifier.webhook_endpoints")


async def test_one_dead_endpoint_cannot_hold_every_slot_from_another(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    recorder = Recorder()
    async with (
        receiving() as stuck,
        receiving() as healthy,
        running_webhooks(
            database_url, keys, recorder=recorder, concurrency=4, endpoint_concurrency=2,
            timeout=10.0,
        ),
    ):  # fmt: skip
        await register(db, keys, stuck)
        stuck.plan(*[Answer(hang=True)] * 10)
        for i in range(5):
            await enqueue(db, keys, f"user{i}@example.com")
        await stuck.wait_for(2)
        await register(db, keys, healthy)
        await enqueue(db, keys, "late@example.com")
        [got] = await healthy.wait_for(1)
        assert len(stuck.received) == 2  # its two places, no more
        await db.execute("DELETE FROM notifier.webhook_endpoints")
    assert got.json["type"] == "verification.created"


# -- server-side request forgery ----------------------------------------------------------------


class CountingPort:
    """A loopback port that counts every connection made to it (the kernel completes a
    connection into the backlog whether or not anyone accepts it; `connections` drains it)."""

    def __init__(self) -> None:
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self._server.setblocking(False)
        self.port = self._server.getsockname()[1]
        self._accepted: list[socket.socket] = []

    def connections(self) -> int:
        while True:
            try:
                self._accepted.append(self._server.accept()[0])
            except BlockingIOError:
                return len(self._accepted)

    def close(self) -> None:
        for s in self._accepted:
            s.close()
        self._server.close()


@pytest.fixture
def counting_port() -> Iterator[CountingPort]:
    port = CountingPort()
    yield port
    port.close()


async def test_a_backlog_waiting_for_its_endpoints_places_is_claimed_as_they_free_not_polled(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    # The database counts the sender's claims; each answer takes 0.3 s, one at a time.
    counted = database_url + ("&" if "?" in database_url else "?") + "track_functions=pl"
    recorder = Recorder()
    async with receiving() as receiver:
        await register(db, keys, receiver)
        receiver.plan(*[Answer(200, delay=0.3)] * 6)
        async with running_webhooks(counted, keys, recorder=recorder, endpoint_concurrency=1):
            async with db.transaction():
                for i in range(6):
                    await enqueue(db, keys, f"user{i}@example.com")
            await receiver.wait_for(6)
            await settled(recorder, 6)
    with anyio.fail_after(WAIT):
        while True:  # a closed session's counts reach the statistics within a second or so
            claims = await db.fetchval(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                "WHERE funcname = 'claim_webhooks_v1'"
            )
            if claims:
                break
            await anyio.sleep(0.1)
    # One claim per NOTIFY and per answer, and a look every fifth of a second at most.
    assert claims <= 6 + 1 + 2 * 10


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1:{port}/hooks",
        "https://localhost:{port}/hooks",
        "https://[::1]:{port}/hooks",
        "https://[::ffff:127.0.0.1]:{port}/hooks",
        "https://10.1.2.3/hooks",
        "https://192.168.0.10/hooks",
        "https://169.254.169.254/latest/meta-data",
        "https://[fd00:ec2::254]/hooks",
        "https://100.64.0.1/hooks",
        "https://0.0.0.0/hooks",
        "http://hooks.example.com/in",
        "https://user:pass@hooks.example.com/in",
    ],
)
async def test_a_private_or_unsafe_target_is_refused_at_registration_before_any_connection(
    db: asyncpg.Connection,
    keys: TokenKeys,
    url: str,
    counting_port: CountingPort,
) -> None:
    with pytest.raises(webhooks.WebhookError):
        await webhooks.add(db, keys, url.format(port=counting_port.port))
    assert await db.fetchval("SELECT count(*) FROM notifier.webhook_endpoints") == 0
    assert counting_port.connections() == 0


async def refused_at_send_time(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, url: str
) -> str:
    """Register `url` while private targets are allowed, send an event once they are not,
    and return the refused attempt's detail."""
    await webhooks.add(db, keys, url, allow_private=True)
    recorder = Recorder()
    async with running_webhooks(database_url, keys, recorder=recorder, allow_private=False):
        await enqueue(db, keys, "ada@example.com")
        with anyio.fail_after(WAIT):
            [attempted] = await recorder.wait_for_kind(events.WebhookAttempted)
    assert attempted.outcome == "refused"
    detail: str = await db.fetchval("SELECT detail FROM notifier.webhook_attempts")
    return detail


async def test_a_target_refused_at_send_time_is_never_connected_to(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    counting_port: CountingPort,
) -> None:
    url = f"https://127.0.0.1:{counting_port.port}/hooks"
    assert "loopback" in await refused_at_send_time(db, database_url, keys, url)
    assert counting_port.connections() == 0


async def test_an_http_endpoint_gets_nothing_in_cleartext_once_private_targets_are_not_allowed(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    counting_port: CountingPort,
) -> None:
    url = f"http://127.0.0.1:{counting_port.port}/hooks"
    assert "must be https" in await refused_at_send_time(db, database_url, keys, url)
    assert counting_port.connections() == 0


async def test_a_retry_after_that_is_no_number_is_ignored_and_the_schedule_waits(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    # "\xb2" is "²" in latin-1, which Python calls a digit but cannot make a float of.
    recorder = Recorder()
    async with receiving() as receiver, running_webhooks(database_url, keys, recorder=recorder):
        await register(db, keys, receiver)
        receiver.plan(Answer(429, headers=(("Retry-After", "\xb2"),)))
        await enqueue(db, keys, "ada@example.com")
        await settled(recorder)
    assert await attempt_outcomes(db) == ["throttled", "delivered"]


async def test_an_unknown_endpoint_id_is_an_error_for_every_change(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    missing = uuid.uuid4()
    for change in (
        webhooks.remove(db, missing),
        webhooks.enable(db, missing),
        webhooks.rotate(db, keys, missing, 60),
    ):
        with pytest.raises(webhooks.WebhookError):
            await change
