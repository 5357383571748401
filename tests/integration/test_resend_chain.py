"""A link's life after a resend: the app follows the chain to its outcome, an old link renews
only once and only for an unverified user, and a double tap confirms once."""

from __future__ import annotations

import uuid

import anyio
import asyncpg
import httpx
import pytest

from notifier.tokens import TokenKeys
from tests.support.apps import Clients
from tests.support.deliveries import Enqueued, enqueue, expire_verification, link_token

pytestmark = pytest.mark.anyio

PARALLEL = 50


async def verifications(db: asyncpg.Connection) -> int:
    return int(await db.fetchval("SELECT count(*) FROM notifier.verifications"))


async def renewed_from_its_expired_link(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> tuple[Enqueued, uuid.UUID]:
    """A verification whose link expired, renewed from its own page: (it, the fresh one)."""
    first = await enqueue(db, keys, "ada@example.com", user_id="ada")
    await expire_verification(db, first.outbox_id)
    token = await link_token(db, keys, first.id)
    assert (await apps.public.post("/verify/resend", data={"token": token})).status_code == 202
    fresh = await db.fetchval(
        "SELECT superseded_by FROM notifier.verifications WHERE id = $1", first.id
    )
    assert fresh is not None
    return first, fresh


# -- the app follows a resend --------------------------------------------------------------------


async def test_the_original_id_names_its_successor_and_the_user(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    first, fresh = await renewed_from_its_expired_link(apps, db, keys)
    status = (await apps.internal.get(f"/v1/verifications/{first.id}")).json()
    assert status["user_id"] == "ada"
    assert status["superseded"] is True and status["superseded_by"] == str(fresh)
    assert status["latest"]["id"] == str(fresh) and status["latest"]["verified"] is False


async def test_confirming_the_fresh_link_shows_on_the_original_id(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    first, fresh = await renewed_from_its_expired_link(apps, db, keys)
    confirmed = await apps.public.post(
        "/v1/verifications/confirm", json={"token": await link_token(db, keys, fresh)}
    )
    assert confirmed.json()["outcome"] == "verified"
    latest = (await apps.internal.get(f"/v1/verifications/{first.id}")).json()["latest"]
    assert latest["id"] == str(fresh) and latest["verified"] is True
    assert latest["verified_at"] is not None


async def test_the_chain_is_followed_through_every_resend(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    ids = [(await enqueue(db, keys, "ada@example.com", user_id="ada")).id for _ in range(3)]
    latest = (await apps.internal.get(f"/v1/verifications/{ids[0]}")).json()["latest"]
    assert latest["id"] == str(ids[-1])
    own = (await apps.internal.get(f"/v1/verifications/{ids[-1]}")).json()
    assert own["superseded_by"] is None and own["latest"]["id"] == str(ids[-1])


async def test_confirming_a_replaced_link_names_what_replaced_it(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    first, fresh = await renewed_from_its_expired_link(apps, db, keys)
    answer = await apps.public.post(
        "/v1/verifications/confirm", json={"token": await link_token(db, keys, first.id)}
    )
    assert answer.status_code == 400
    assert answer.json()["outcome"] == "invalid"
    assert answer.json()["superseded_by"] == str(fresh)


# -- an old link renews once, for an unverified user, while its key is valid -------------------


async def test_a_replaced_link_of_a_verified_user_sends_nothing_and_keeps_the_live_link(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    old = await enqueue(db, keys, "ada@example.com", user_id="ada")
    live = await enqueue(db, keys, "ada@example.com", user_id="ada")
    live_token = await link_token(db, keys, live.id)
    verified = await apps.public.post("/v1/verifications/confirm", json={"token": live_token})
    assert verified.json()["outcome"] == "verified"
    page = await apps.public.post(
        "/verify/resend", data={"token": await link_token(db, keys, old.id)}
    )
    assert page.status_code == 400
    assert await verifications(db) == 2
    again = await apps.public.post("/v1/verifications/confirm", json={"token": live_token})
    assert again.json()["outcome"] == "already_verified"


async def test_a_replaced_unexpired_link_does_not_renew_and_leaves_the_live_link_working(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    old = await enqueue(db, keys, "ada@example.com", user_id="ada")
    live = await enqueue(db, keys, "ada@example.com", user_id="ada")
    await apps.public.post("/verify/resend", data={"token": await link_token(db, keys, old.id)})
    assert await verifications(db) == 2
    page = await apps.public.get("/verify", params={"token": await link_token(db, keys, live.id)})
    assert page.status_code == 200 and "Confirm your email address" in page.text


async def test_an_expired_link_of_a_user_verified_since_sends_nothing(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    # Ada changed her address on the signup form and confirmed the second one.
    expired = await enqueue(db, keys, "ada@old.example", user_id="ada")
    other = await enqueue(db, keys, "ada@new.example", user_id="ada")
    await apps.public.post(
        "/v1/verifications/confirm", json={"token": await link_token(db, keys, other.id)}
    )
    await expire_verification(db, expired.outbox_id)
    page = await apps.public.post(
        "/verify/resend", data={"token": await link_token(db, keys, expired.id)}
    )
    assert page.status_code == 410 and "data-outcome=too_old" in page.text
    assert await verifications(db) == 2


async def test_an_old_addresss_expired_link_does_not_renew_once_the_user_moved_on(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    # Ada typed old@, then corrected it to new@ (still unconfirmed); old@'s link expired.
    old = await enqueue(db, keys, "ada@old.example", user_id="ada")
    await enqueue(db, keys, "ada@new.example", user_id="ada")
    await expire_verification(db, old.outbox_id)
    page = await apps.public.post(
        "/verify/resend", data={"token": await link_token(db, keys, old.id)}
    )
    assert page.status_code == 410 and "data-outcome=too_old" in page.text
    assert await verifications(db) == 2


async def test_an_expired_link_renews_once_for_good_not_once_per_idempotency_window(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    first, _ = await renewed_from_its_expired_link(apps, db, keys)
    # The resend's idempotency key has long been forgotten: a day and more went by.
    await db.execute(
        "UPDATE notifier.verifications SET created_at = now() - interval '2 days', "
        "idempotency_key = NULL"
    )
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - interval '1 hour'")
    again = await apps.public.post(
        "/verify/resend", data={"token": await link_token(db, keys, first.id)}
    )
    assert again.status_code == 400  # a replaced link: "not valid, or a newer link replaced it"
    assert await verifications(db) == 2


async def test_pressing_the_button_again_answers_the_same_and_sends_nothing_more(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    first, _ = await renewed_from_its_expired_link(apps, db, keys)
    again = await apps.public.post(
        "/verify/resend", data={"token": await link_token(db, keys, first.id)}
    )
    assert again.status_code == 202 and "data-outcome=resent" in again.text
    assert await verifications(db) == 2


async def test_an_expired_link_does_not_renew_once_its_clients_key_is_revoked(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = await apps.internal.post(
        "/v1/verifications",
        json={"user_id": "ada", "email": "ada@example.com"},
        headers={"Idempotency-Key": "k1"},
    )
    verification = uuid.UUID(created.json()["id"])
    client_id = await db.fetchval(
        "SELECT client_id FROM notifier.verifications WHERE id = $1", verification
    )
    await db.execute("UPDATE notifier.api_keys SET revoked_at = now() WHERE id = $1", client_id)
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - interval '1 minute'")
    page = await apps.public.post(
        "/verify/resend", data={"token": await link_token(db, keys, verification)}
    )
    assert page.status_code == 410
    assert await verifications(db) == 1


# -- a double tap confirms once and says so -------------------------------------------------------


async def parallel(count: int, call: object) -> list[httpx.Response]:
    answers: list[httpx.Response] = []

    async def one() -> None:
        assert callable(call)
        answers.append(await call())

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    return answers


async def test_parallel_json_confirms_of_one_link_verify_once_and_all_say_verified(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = await enqueue(db, keys, "ada@example.com")
    token = await link_token(db, keys, created.id)
    answers = await parallel(
        PARALLEL, lambda: apps.public.post("/v1/verifications/confirm", json={"token": token})
    )
    outcomes = sorted(a.json()["outcome"] for a in answers)
    assert outcomes == ["already_verified"] * (PARALLEL - 1) + ["verified"]
    assert all(a.status_code == 200 for a in answers)


async def test_parallel_confirm_buttons_of_one_link_never_show_the_confirm_page_again(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = await enqueue(db, keys, "ada@example.com")
    token = await link_token(db, keys, created.id)
    answers = await parallel(PARALLEL, lambda: apps.public.post("/verify", data={"token": token}))
    pages = sorted(
        "verified" if "data-outcome=verified" in a.text else a.text[:80] for a in answers
    )
    already = [a for a in answers if "data-outcome=already_verified" in a.text]
    assert pages.count("verified") == 1
    assert len(already) == PARALLEL - 1
