"""The console's view of events and webhooks: endpoints with their health, an endpoint's
deliveries and attempts (the receiver's words escaped and cut short), Replay for a dead one
(admin only), and a verification's events on its page."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import asyncpg
import httpx
import pytest

from notifier import events
from notifier.runner import internal_app
from notifier.storage import webhooks
from notifier.tokens import TokenKeys
from notifier.web.listeners import Services
from tests.support.apps import INTERNAL_BASE, bearer, make_key
from tests.support.deliveries import enqueue, policy_for_tests
from tests.support.recorder import Recorder
from tests.support.webhook_receiver import Answer, receiving
from tests.support.workers import running_webhooks

pytestmark = pytest.mark.anyio

WAIT = 15
HOSTILE = b"<script>alert(1)</script>" + b"x" * 2000


@pytest.fixture
async def console(pool: asyncpg.Pool, keys: TokenKeys) -> AsyncIterator[httpx.AsyncClient]:
    app = internal_app(Services.over(pool, policy_for_tests(keys)))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=INTERNAL_BASE
    ) as client:
        yield client


async def dead_delivery(db: asyncpg.Connection, database_url: str, keys: TokenKeys) -> int:
    """One webhook delivery that ran out of retries against a receiver answering 500s."""
    recorder = Recorder()
    async with (
        receiving() as receiver,
        running_webhooks(database_url, keys, recorder=recorder, retry_schedule=(0.05,)),
    ):
        await webhooks.add(db, keys, receiver.url, allow_private=True)
        receiver.plan(Answer(500, body=HOSTILE), Answer(500, body=HOSTILE))
        await enqueue(db, keys, "ada@example.com")
        with anyio.fail_after(WAIT):
            await recorder.wait_for(
                lambda r: any(e.status == "dead" for e in r.of(events.WebhookAttempted))
            )
    delivery_id: int = await db.fetchval("SELECT id FROM notifier.webhook_deliveries")
    return delivery_id


async def test_the_endpoints_page_shows_each_endpoints_health_and_backlog(
    console: httpx.AsyncClient, db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    await dead_delivery(db, database_url, keys)
    page = await console.get("/console/webhooks", headers=bearer(await make_key(db, ["read"])))
    assert page.status_code == 200
    assert "failing" in page.text and "0 waiting, 1 dead" in page.text


async def test_an_endpoints_page_shows_its_attempts_escaped_and_cut_short(
    console: httpx.AsyncClient, db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    await dead_delivery(db, database_url, keys)
    [endpoint] = await webhooks.listing(db)
    page = await console.get(
        f"/console/webhooks/{endpoint.id}", headers=bearer(await make_key(db, ["read"]))
    )
    assert page.status_code == 200
    assert "<script>" not in page.text and "&lt;script&gt;" in page.text
    assert "x" * 400 not in page.text  # the receiver's answer, cut to 300 characters
    assert "verification.created" in page.text and "HTTP 500" in page.text
    # A read-only key sees no Replay button.
    assert 'action="/console/webhooks/deliveries/' not in page.text


async def test_replay_needs_admin_and_sends_the_dead_delivery_again(
    console: httpx.AsyncClient, db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    delivery_id = await dead_delivery(db, database_url, keys)
    path = f"/console/webhooks/deliveries/{delivery_id}/replay"
    refused = await console.post(path, headers=bearer(await make_key(db, ["read"])))
    assert refused.status_code == 403
    admin = bearer(await make_key(db, ["read", "admin"]))
    replayed = await console.post(path, headers=admin)
    assert replayed.status_code == 303
    assert replayed.headers["location"].endswith("?notice=replayed")
    assert await db.fetchval("SELECT status FROM notifier.webhook_deliveries") == "pending"
    again = await console.post(path, headers=admin)
    assert again.status_code == 409  # not dead any more
    assert (
        await console.post("/console/webhooks/deliveries/999/replay", headers=admin)
    ).status_code == 404


async def test_a_verifications_page_lists_its_events_and_their_webhooks(
    console: httpx.AsyncClient, db: asyncpg.Connection, database_url: str, keys: TokenKeys
) -> None:
    await dead_delivery(db, database_url, keys)
    verification_id = await db.fetchval("SELECT id FROM notifier.verifications")
    page = await console.get(
        f"/console/deliveries/{verification_id}", headers=bearer(await make_key(db, ["read"]))
    )
    assert page.status_code == 200
    assert "Events" in page.text and "verification.created" in page.text
    event = await db.fetchval("SELECT 'evt_' || replace(uid::text, '-', '') FROM notifier.events")
    assert event in page.text
    assert "Webhooks" in page.text and "/console/webhooks/" in page.text


async def test_an_unknown_endpoint_is_a_404_page(
    console: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    read = bearer(await make_key(db, ["read"]))
    for path in (
        "/console/webhooks/not-an-id",
        "/console/webhooks/00000000-0000-0000-0000-000000000000",
    ):
        assert (await console.get(path, headers=read)).status_code == 404


async def test_a_read_key_sees_an_endpoints_origin_and_an_admin_its_whole_url(
    console: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    # Webhook URLs often carry a credential (Slack's do, in the path).
    url = "https://127.0.0.1:8443/services/T0/B0/secret-part?token=also-secret"
    endpoint, _ = await webhooks.add(db, keys, url, allow_private=True)
    read, admin = await make_key(db, ["read"]), await make_key(db, ["read", "admin"])
    for path in ("/console/webhooks", f"/console/webhooks/{endpoint.id}"):
        seen = (await console.get(path, headers=bearer(read))).text
        assert "secret-part" not in seen and "also-secret" not in seen
        assert "https://127.0.0.1:8443/…" in seen
        assert url.replace("&", "&amp;") in (await console.get(path, headers=bearer(admin))).text
