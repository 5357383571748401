"""The way back to the app: a return_to is accepted only under the allow-list (and the API
key's own narrowing of it), refused with 422 otherwise and never replaced; it is kept by
resends; after Confirm the page answers 303 to it with a signed outcome that
notifier.check_return accepts and nothing forged or stale passes."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest

import notifier
from notifier import apikeys
from notifier.return_urls import InvalidReturn, ReturnUrls, check_return
from notifier.storage import api_keys
from notifier.tokens import TokenKeys
from notifier.web.console.data import resend
from tests.support.apps import Clients, bearer
from tests.support.deliveries import link_token, policy_for_tests

pytestmark = pytest.mark.anyio

ALLOWED = "https://app.example.com/welcome, https://*.example.org/"
RETURN_TO = "https://app.example.com/welcome?step=2"


@pytest.fixture
def policy_overrides() -> dict[str, Any]:
    return {"return_urls": ReturnUrls.parse(ALLOWED)}


async def request(apps: Clients, return_to: str | None, key: str | None = None) -> Any:
    body: dict[str, Any] = {"user_id": "ada", "email": "ada@example.com"}
    if return_to is not None:
        body["return_to"] = return_to
    headers = {"Idempotency-Key": str(uuid.uuid4()), **(bearer(key) if key else {})}
    return await apps.internal.post("/v1/verifications", json=body, headers=headers)


async def press_confirm(apps: Clients, token: str) -> Any:
    return await apps.public.post("/verify", data={"token": token})


def client_of(key: str) -> str:
    return apikeys.parse(key).id


async def test_a_return_to_outside_the_allow_list_is_refused_and_nothing_is_written(
    apps: Clients, db: asyncpg.Connection
) -> None:
    for outside in (
        "https://evil.example.net/welcome",
        "https://app.example.com/welcomeback",
        "https://app.example.com:8443/welcome",
        "http://app.example.com/welcome",
        "https://a.b.example.org/",
        "https://app.example.com/welcome/../admin",
        "https://app.example.com/welcome%2f..%2fadmin",
        "https://user@app.example.com/welcome",
        "https://app.example.com/welcome?outcome=verified",
        "javascript:alert(1)",
    ):
        answer = await request(apps, outside)
        assert answer.status_code == 422, outside
        assert answer.json()["error"]["fields"] == ["return_to"]
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 0


async def test_confirm_answers_303_to_the_return_to_with_an_outcome_check_return_trusts(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = (await request(apps, RETURN_TO)).json()
    answer = await press_confirm(apps, await link_token(db, keys, made["id"]))
    assert answer.status_code == 303
    location = answer.headers["location"]
    assert location.startswith(RETURN_TO + "&verification_id=")
    returned = check_return(location, keys, client_id=client_of(apps.key))
    assert (str(returned.verification_id), returned.outcome) == (made["id"], "verified")
    # Pressing again: already verified, and back to the app all the same.
    again = await press_confirm(apps, await link_token(db, keys, made["id"]))
    assert check_return(again.headers["location"], keys, client_id=client_of(apps.key)).outcome == (
        "already_verified"
    )


async def test_the_json_confirm_names_the_signed_return_url(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = (await request(apps, RETURN_TO)).json()
    token = await link_token(db, keys, made["id"])
    answer = await apps.public.post("/v1/verifications/confirm", json={"token": token})
    returned = check_return(answer.json()["return_url"], keys, client_id=client_of(apps.key))
    assert str(returned.verification_id) == made["id"]


async def test_a_forged_moved_or_stale_return_is_refused(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = (await request(apps, RETURN_TO)).json()
    location = (await press_confirm(apps, await link_token(db, keys, made["id"]))).headers[
        "location"
    ]
    query = parse_qs(urlsplit(location).query)
    client = client_of(apps.key)
    other_id = location.replace(made["id"], str(uuid.uuid4()))
    forged_outcome = location.replace("outcome=verified", "outcome=already_verified")
    for bad in (other_id, forged_outcome, location.replace("signature=", "signature=x")):
        with pytest.raises(InvalidReturn):
            check_return(bad, keys, client_id=client)
    with pytest.raises(InvalidReturn):  # another client's redirect
        check_return(location, keys, client_id="0123456789ab")
    with pytest.raises(InvalidReturn):  # too late
        check_return(location, keys, client_id=client, now=float(query["expires"][0]) + 1)
    with pytest.raises(InvalidReturn):  # another deployment's secret
        check_return(
            location, TokenKeys(("another secret of at least thirty-two chars",)), client_id=client
        )


async def test_without_return_to_confirm_shows_the_page_as_before(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = (await request(apps, None)).json()
    answer = await press_confirm(apps, await link_token(db, keys, made["id"]))
    assert answer.status_code == 200
    assert "location" not in answer.headers


async def test_a_fresh_link_from_the_expired_page_keeps_the_return_to(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = (await request(apps, RETURN_TO)).json()
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - interval '1 second'")
    answer = await apps.public.post(
        "/verify/resend", data={"token": await link_token(db, keys, made["id"])}
    )
    assert answer.status_code == 202
    rows = await db.fetch(
        "SELECT id, return_to, superseded_by FROM notifier.verifications ORDER BY created_at"
    )
    assert [r["return_to"] for r in rows] == [RETURN_TO, RETURN_TO]
    assert rows[0]["superseded_by"] == rows[1]["id"]


async def test_a_console_resend_keeps_the_return_to(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    made = (await request(apps, RETURN_TO)).json()
    await db.execute(
        "UPDATE notifier.email_outbox SET status = 'failed', completed_at = now(), "
        "last_outcome = 'permanent'"
    )
    done = await resend(db, uuid.UUID(made["id"]), apps.services.policy, client_of(apps.key))
    assert done is not None and done.outcome == "resent"
    kept = await db.fetchval(
        "SELECT return_to FROM notifier.verifications WHERE id = $1", done.verification_id
    )
    assert kept == RETURN_TO


async def test_an_api_key_narrowed_to_fewer_return_urls_is_held_to_them(
    apps: Clients, db: asyncpg.Connection
) -> None:
    narrow = (
        await api_keys.create(db, "shop", ["request"], return_urls=["https://shop.example.org/"])
    ).key
    assert (await request(apps, "https://shop.example.org/done", narrow)).status_code == 202
    # Under the deployment's list, but not this key's.
    assert (await request(apps, RETURN_TO, narrow)).status_code == 422
    await api_keys.set_return_urls(db, client_of(narrow), None)
    await anyio_sleep_for_cache()
    assert (await request(apps, RETURN_TO, narrow)).status_code == 202


async def anyio_sleep_for_cache() -> None:
    import anyio

    await anyio.sleep(api_keys.CACHE_SECONDS)


async def test_the_library_call_checks_return_to_as_the_api_does(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    policy = policy_for_tests(keys, return_urls=ReturnUrls.parse(ALLOWED))
    with pytest.raises(notifier.InvalidRequest, match="return_to"):
        async with db.transaction():
            await notifier.request_verification(
                db, user_id="ada", email="ada@example.com", policy=policy,
                return_to="https://evil.example.net/",
            )  # fmt: skip
    async with db.transaction():
        made = await notifier.request_verification(
            db, user_id="ada", email="ada@example.com", policy=policy, return_to=RETURN_TO
        )
    kept = await db.fetchval("SELECT return_to FROM notifier.verifications WHERE id = $1", made.id)
    assert kept == RETURN_TO


async def test_with_no_allow_list_every_return_to_is_refused(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    with pytest.raises(notifier.InvalidRequest, match="NOTIFIER_RETURN_URLS is empty"):
        async with db.transaction():
            await notifier.request_verification(
                db, user_id="ada", email="ada@example.com", policy=policy_for_tests(keys),
                return_to=RETURN_TO,
            )  # fmt: skip
