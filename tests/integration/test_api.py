"""The HTTP API against a real database: requests, idempotency, throttling, confirmation."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import asyncpg
import httpx
import pytest

from notifier.tokens import TokenKeys
from tests.support.apps import Clients, serve
from tests.support.deliveries import expire_verification, link_token, policy_for_tests

pytestmark = pytest.mark.anyio

BODY = {"user_id": "user-1", "email": "Ada@Example.COM", "purpose": "signup"}


@pytest.fixture
def client(apps: Clients) -> httpx.AsyncClient:
    """The internal API, with a key that has every scope."""
    return apps.internal


@pytest.fixture
def public(apps: Clients) -> httpx.AsyncClient:
    """The public listener: the pages a link opens and the JSON confirm."""
    return apps.public


async def post(
    client: httpx.AsyncClient, body: Any = BODY, key: str | None = "key-1", **kwargs: Any
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return await client.post("/v1/verifications", json=body, headers=headers, **kwargs)


async def counts(db: asyncpg.Connection) -> tuple[int, int]:
    return (
        await db.fetchval("SELECT count(*) FROM notifier.verifications"),
        await db.fetchval("SELECT count(*) FROM notifier.email_outbox"),
    )


async def test_request_writes_a_verification_and_its_outbox_row_and_answers_202(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    response = await post(client)
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "pending" and set(body) == {"id", "status", "method", "expires_at"}
    assert body["method"] == "link"
    row = await db.fetchrow(
        """SELECT v.email, o.status FROM notifier.verifications v
           JOIN notifier.email_outbox o ON o.verification_id = v.id WHERE v.id = $1""",
        uuid.UUID(body["id"]),
    )
    assert (row["email"], row["status"]) == ("Ada@example.com", "pending")


async def test_same_key_and_body_return_the_original_result_without_a_second_row(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    first = await post(client)
    second = await post(client)
    assert second.status_code == 202
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert await counts(db) == (1, 1)


async def test_same_key_with_a_different_body_is_a_conflict(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    await post(client)
    response = await post(client, {**BODY, "email": "other@example.com"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_conflict"
    assert await counts(db) == (1, 1)


async def test_concurrent_requests_with_one_key_write_one_row(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    statuses: list[int] = []

    async def send() -> None:
        statuses.append((await post(client, key="shared")).status_code)

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(send)
    assert statuses == [202] * 6
    assert await counts(db) == (1, 1)


@pytest.mark.parametrize("policy_overrides", [{"idempotency_ttl": 60.0}])
async def test_an_expired_idempotency_key_can_be_used_again(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    first = (await post(client)).json()
    await db.execute("UPDATE notifier.verifications SET created_at = now() - interval '61 seconds'")
    second = await post(client)
    assert second.status_code == 202 and second.json()["id"] != first["id"]
    assert await counts(db) == (2, 2)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BODY, "email": "not-an-address"}, "email"),
        ({**BODY, "email": "a" * 250 + "@example.com"}, "email"),
        ({**BODY, "email": "ada@example.com\r\nBcc: all@example.com"}, "email"),
        ({**BODY, "user_id": "u\r\nX-Injected: 1"}, "user_id"),
        ({**BODY, "user_id": ""}, "user_id"),
        ({**BODY, "user_id": 42}, "user_id"),
        ({**BODY, "purpose": "Sign Up\n"}, "purpose"),
        ({**BODY, "extra": "field"}, "extra"),
        ({"user_id": "u"}, "email"),
        ([1, 2, 3], ""),
    ],
)
async def test_bad_input_gets_a_clear_error_and_stores_nothing(
    client: httpx.AsyncClient, db: asyncpg.Connection, body: Any, field: str
) -> None:
    response = await post(client, body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert field in error["message"]
    assert await counts(db) == (0, 0)


async def test_missing_idempotency_key_is_a_clear_error(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    response = await post(client, key=None)
    assert response.status_code == 422
    assert "Idempotency-Key" in response.json()["error"]["message"]
    assert await counts(db) == (0, 0)


async def test_wrong_content_type_is_refused(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    response = await client.post(
        "/v1/verifications",
        content="user_id=u&email=a@example.com",
        headers={"Idempotency-Key": "k", "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 415
    assert await counts(db) == (0, 0)


async def test_malformed_json_is_a_clear_error(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    response = await client.post(
        "/v1/verifications",
        content=b'{"user_id": "u", ',
        headers={"Idempotency-Key": "k", "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    # The whole body is at fault, not a field named after the offset where parsing stopped.
    problem = response.json()["error"]
    assert problem["message"] == "body: the body is not valid JSON"
    assert problem.get("fields", []) == []
    assert await counts(db) == (0, 0)


async def test_oversized_body_is_refused(client: httpx.AsyncClient, db: asyncpg.Connection) -> None:
    response = await post(client, {**BODY, "user_id": "x" * 100_000})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"
    assert await counts(db) == (0, 0)


async def test_a_new_request_supersedes_the_earlier_unverified_one(
    client: httpx.AsyncClient, public: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    first = (await post(client, key="k1")).json()
    old_token = await link_token(db, keys, first["id"])
    second = (await post(client, key="k2")).json()
    status = (await client.get(f"/v1/verifications/{first['id']}")).json()
    assert (status["status"], status["superseded"], status["last_outcome"]) == (
        "expired",
        True,
        "superseded",
    )
    confirmed = await public.post("/v1/verifications/confirm", json={"token": old_token})
    assert confirmed.json()["outcome"] == "invalid"
    assert (await client.get(f"/v1/verifications/{second['id']}")).json()["status"] == "pending"


@pytest.mark.parametrize("policy_overrides", [{"resend_limit": 2, "resend_window": 3600.0}])
async def test_requests_beyond_the_limit_per_user_get_429_with_retry_after(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    for n in range(2):
        body = {**BODY, "email": f"a{n}@example.com"}
        assert (await post(client, body, key=f"k{n}")).status_code == 202
    response = await post(client, {**BODY, "email": "a9@example.com"}, key="k9")
    assert response.status_code == 429
    assert 3500 < int(response.headers["Retry-After"]) <= 3600
    assert await counts(db) == (2, 2)


@pytest.mark.parametrize("policy_overrides", [{"resend_limit": 2, "resend_window": 3600.0}])
async def test_requests_beyond_the_limit_per_address_get_429(
    client: httpx.AsyncClient,
) -> None:
    for n in range(2):
        assert (await post(client, {**BODY, "user_id": f"u{n}"}, key=f"k{n}")).status_code == 202
    response = await post(client, {**BODY, "user_id": "u9"}, key="k9")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "throttled"


async def test_a_suppressed_address_gets_a_clear_error(
    client: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    # Keyed by canonical mailbox: the request's "Ada@Example.COM" is this mailbox.
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason) VALUES ($1, '550 gone')",
        "ada@example.com",
    )
    response = await post(client)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "email_suppressed"
    assert await counts(db) == (0, 0)


async def test_status_shows_delivery_state_with_the_email_redacted_and_no_token(
    client: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = (await post(client)).json()
    token = await link_token(db, keys, created["id"])
    response = await client.get(f"/v1/verifications/{created['id']}")
    body = response.json()
    assert (body["status"], body["verified"], body["attempts"]) == ("pending", False, 0)
    assert body["email"] == "A***@example.com"
    assert token not in response.text and token.partition(".")[2] not in response.text


async def test_unknown_verification_is_404(client: httpx.AsyncClient) -> None:
    response = await client.get(f"/v1/verifications/{uuid.uuid4()}")
    assert response.status_code == 404
    assert (await client.get(f"/v1/verifications/{uuid.uuid4()}/attempts")).status_code == 404


async def test_malformed_verification_id_is_a_clear_error(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/verifications/not-a-uuid")).status_code == 422


async def test_confirming_a_live_token_verifies_once(
    client: httpx.AsyncClient, public: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = (await post(client)).json()
    token = await link_token(db, keys, created["id"])
    first = await public.post("/v1/verifications/confirm", json={"token": token})
    second = await public.post("/v1/verifications/confirm", json={"token": token})
    assert (first.status_code, first.json()["outcome"]) == (200, "verified")
    assert (second.status_code, second.json()["outcome"]) == (200, "already_verified")
    assert (await client.get(f"/v1/verifications/{created['id']}")).json()["verified"] is True


async def test_confirming_an_expired_token_is_410(
    client: httpx.AsyncClient, public: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = (await post(client)).json()
    token = await link_token(db, keys, created["id"])
    outbox_id = await db.fetchval("SELECT id FROM notifier.email_outbox")
    await expire_verification(db, outbox_id)
    response = await public.post("/v1/verifications/confirm", json={"token": token})
    assert (response.status_code, response.json()["outcome"]) == (410, "expired")


@pytest.mark.parametrize("token", ["garbage", "0123abcd." + "A" * 43, "x" * 100])
async def test_confirming_an_unknown_or_malformed_token_is_400(
    client: httpx.AsyncClient, public: httpx.AsyncClient, token: str
) -> None:
    response = await public.post("/v1/verifications/confirm", json={"token": token})
    assert (response.status_code, response.json()["outcome"]) == (400, "invalid")


async def test_opening_the_link_changes_nothing_until_confirm_is_pressed(
    client: httpx.AsyncClient, public: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = (await post(client)).json()
    token = await link_token(db, keys, created["id"])
    page = await public.get("/verify", params={"token": token})
    assert page.status_code == 200 and "Confirm" in page.text
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert await db.fetchval("SELECT verified_at FROM notifier.verifications") is None
    done = await public.post("/verify", data={"token": token})
    assert "data-outcome=verified" in done.text
    assert await db.fetchval("SELECT verified_at FROM notifier.verifications") is not None


async def test_expired_link_page_offers_one_fresh_link(
    client: httpx.AsyncClient, public: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = (await post(client)).json()
    token = await link_token(db, keys, created["id"])
    await expire_verification(db, await db.fetchval("SELECT id FROM notifier.email_outbox"))
    page = await public.get("/verify", params={"token": token})
    assert page.status_code == 410 and "data-outcome=expired" in page.text
    first = await public.post("/verify/resend", data={"token": token})
    again = await public.post("/verify/resend", data={"token": token})
    assert (first.status_code, again.status_code) == (202, 202)
    assert await counts(db) == (2, 2)


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok", "detail": None}
    assert (await client.get("/readyz")).json()["status"] == "ready"


async def test_readiness_fails_while_migrations_are_pending(
    empty_database_url: str, keys: TokenKeys
) -> None:
    from notifier.storage.database import create_pool

    pool = await create_pool(empty_database_url)
    try:
        # No schema, so no key either: the probe needs none.
        async with serve(pool, policy_for_tests(keys), key="unused") as apps:
            response = await apps.internal.get("/readyz")
    finally:
        await pool.close()
    assert response.status_code == 503
    assert response.json()["detail"] == "migrations pending"


async def test_an_over_long_link_shows_the_invalid_page_not_an_error(
    client: httpx.AsyncClient,
    public: httpx.AsyncClient,
) -> None:
    page = await public.get("/verify", params={"token": "x" * 300})
    assert page.status_code == 400 and "data-outcome=invalid" in page.text


async def test_asking_to_resend_a_live_link_shows_its_confirm_button(
    client: httpx.AsyncClient, public: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = (await post(client)).json()
    token = await link_token(db, keys, created["id"])
    page = await public.post("/verify/resend", data={"token": token})
    assert page.status_code == 200 and "Confirm" in page.text
    assert await counts(db) == (1, 1)


@pytest.mark.parametrize("policy_overrides", [{"resend_limit": 1}])
async def test_a_refused_resend_gets_the_same_generic_page_whatever_the_reason(
    client: httpx.AsyncClient, public: httpx.AsyncClient, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = (await post(client)).json()
    token = await link_token(db, keys, created["id"])
    await expire_verification(db, await db.fetchval("SELECT id FROM notifier.email_outbox"))
    throttled = await public.post("/verify/resend", data={"token": token})
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason) VALUES ('ada@example.com', 'x')"
    )
    await db.execute("UPDATE notifier.verifications SET created_at = now() - interval '2 hours'")
    suppressed = await public.post("/verify/resend", data={"token": token})
    # Whoever holds a link learns nothing about the address: not which limit, not when.
    assert (throttled.status_code, suppressed.status_code) == (429, 429)
    assert throttled.text == suppressed.text
    assert "Retry-After" not in throttled.headers
    assert await counts(db) == (1, 1)
