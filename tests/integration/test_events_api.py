"""The HTTP faces of events and webhooks on the internal API: the feed (`read`) and the
endpoints' management (`admin`), with the refusals a caller can meet."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from standardwebhooks.webhooks import Webhook

from notifier.tokens import TokenKeys
from notifier.webhook_signing import SecretRef, headers, secret_of
from tests.support.apps import Clients, bearer, make_key
from tests.support.deliveries import enqueue

pytestmark = pytest.mark.anyio


async def test_the_feed_pages_through_events_and_resumes_from_next(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    for i in range(5):
        await enqueue(db, keys, f"user{i}@example.com")
    first = (await apps.internal.get("/v1/events", params={"limit": 3})).json()
    rest = (await apps.internal.get("/v1/events", params={"after": first["next"]})).json()
    after = (await apps.internal.get("/v1/events", params={"after": rest["next"]})).json()
    ids = [e["id"] for e in first["events"] + rest["events"]]
    assert len(ids) == len(set(ids)) == 5
    assert {e["type"] for e in first["events"]} == {"verification.created"}
    assert first["events"][-1]["cursor"] == first["next"]
    assert after == {"events": [], "next": rest["next"]}


@pytest.mark.parametrize("after", ["nonsense", "1-", "-1", "1-2-3", "1" * 30 + "-1"])
async def test_a_malformed_cursor_is_refused_with_422(apps: Clients, after: str) -> None:
    answer = await apps.internal.get("/v1/events", params={"after": after})
    assert answer.status_code == 422
    assert answer.json()["error"]["fields"] == ["after"]


async def test_the_feed_needs_the_read_scope(apps: Clients, db: asyncpg.Connection) -> None:
    key = await make_key(db, ["request"])
    answer = await apps.internal.get("/v1/events", headers=bearer(key))
    assert answer.status_code == 403


async def test_an_endpoint_on_a_private_address_is_refused_with_422_and_not_stored(
    apps: Clients, db: asyncpg.Connection
) -> None:
    for url in ("http://127.0.0.1:9/hooks", "https://127.0.0.1/hooks", "https://localhost/x"):
        answer = await apps.internal.post("/v1/webhooks", json={"url": url})
        assert answer.status_code == 422, url
        assert answer.json()["error"]["fields"] == ["url"]
    assert await db.fetchval("SELECT count(*) FROM notifier.webhook_endpoints") == 0


async def test_an_unknown_event_type_is_refused_with_422(apps: Clients) -> None:
    answer = await apps.internal.post(
        "/v1/webhooks", json={"url": "https://93.184.216.34/hooks", "event_types": ["user.hacked"]}
    )
    assert answer.status_code == 422


async def test_registering_listing_rotating_and_removing_an_endpoint(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    # A public literal address: registered without any lookup, and never sent to here.
    created = await apps.internal.post(
        "/v1/webhooks",
        json={"url": "https://93.184.216.34/hooks", "event_types": ["verification.confirmed"]},
    )
    assert created.status_code == 201
    endpoint = created.json()
    assert endpoint["secret"].startswith("whsec_")
    assert endpoint["event_types"] == ["verification.confirmed"]
    listed = (await apps.internal.get("/v1/webhooks")).json()["endpoints"]
    assert [e["id"] for e in listed] == [endpoint["id"]]
    assert "secret" not in listed[0]
    rotated = await apps.internal.post(f"/v1/webhooks/{endpoint['id']}/rotate")
    assert rotated.status_code == 200
    new = rotated.json()["secret"]
    assert new != endpoint["secret"] and rotated.json()["previous_secret_until"] is not None
    # Both secrets sign while the old one overlaps: each verifies alone.
    row = await db.fetchrow("SELECT * FROM notifier.webhook_endpoints")
    refs = [
        SecretRef(row["secret_key_id"], bytes(row["secret_nonce"])),
        SecretRef(row["previous_key_id"], bytes(row["previous_nonce"])),
    ]
    secrets = [secret_of(keys, uuid.UUID(endpoint["id"]), r) for r in refs]
    import time

    signed = headers("evt_1", int(time.time()), b"{}", secrets)
    for shown in (new, endpoint["secret"]):
        Webhook(shown).verify(b"{}", signed)
    assert (await apps.internal.post(f"/v1/webhooks/{endpoint['id']}/enable")).status_code == 204
    assert (await apps.internal.delete(f"/v1/webhooks/{endpoint['id']}")).status_code == 204
    assert (await apps.internal.get("/v1/webhooks")).json() == {"endpoints": []}


async def test_changing_an_unknown_endpoint_or_replaying_an_unknown_delivery_is_404(
    apps: Clients,
) -> None:
    missing = uuid.uuid4()
    for method, path in (
        ("DELETE", f"/v1/webhooks/{missing}"),
        ("POST", f"/v1/webhooks/{missing}/rotate"),
        ("POST", f"/v1/webhooks/{missing}/enable"),
        ("POST", "/v1/webhooks/deliveries/12345/replay"),
    ):
        answer = await apps.internal.request(method, path)
        assert answer.status_code == 404, path


async def test_managing_webhooks_needs_the_admin_scope(
    apps: Clients, db: asyncpg.Connection
) -> None:
    key = await make_key(db, ["request", "read", "metrics"])
    answer = await apps.internal.post(
        "/v1/webhooks", json={"url": "https://93.184.216.34/hooks"}, headers=bearer(key)
    )
    assert answer.status_code == 403
    assert await db.fetchval("SELECT count(*) FROM notifier.webhook_endpoints") == 0
