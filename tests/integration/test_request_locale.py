"""A request's locale: validated, kept on the verification, handed to the worker by the claim,
and honoured by the email, the API and the resend button alike."""

from __future__ import annotations

import email
import email.policy
import functools
import uuid
from email.message import EmailMessage

import anyio
import asyncpg
import pytest

from notifier import events
from notifier.storage.outbox import request_standalone
from notifier.tokens import TokenKeys
from notifier.verifications import IdempotencyConflict, InvalidRequest
from tests.support.apps import Clients
from tests.support.deliveries import enqueue, expire_verification, link_token, policy_for_tests
from tests.support.recorder import recorded
from tests.support.smtp_server import SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 15  # seconds any single expectation may take before the test fails


async def stored_locales(db: asyncpg.Connection) -> list[str | None]:
    rows = await db.fetch("SELECT locale FROM notifier.verifications ORDER BY created_at")
    return [r["locale"] for r in rows]


def parsed(content: bytes) -> EmailMessage:
    message = email.message_from_bytes(content, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


async def test_a_requests_locale_is_kept_in_its_normal_form(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    await enqueue(db, keys, "a@example.com", locale="pt_br")
    await enqueue(db, keys, "b@example.com")
    assert await stored_locales(db) == ["pt-BR", None]


@pytest.mark.parametrize("locale", ["x", "english please", "de\r\nBcc: x", "de-" + "a" * 40])
async def test_a_malformed_locale_is_refused_and_writes_nothing(
    db: asyncpg.Connection, keys: TokenKeys, locale: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await enqueue(db, keys, locale=locale)
    assert refused.value.field == "locale"
    assert await stored_locales(db) == []


async def test_the_same_idempotency_key_with_another_locale_is_a_conflict(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    policy = policy_for_tests(keys)
    request = functools.partial(
        request_standalone,
        db,
        user_id="u1",
        email="a@example.com",
        idempotency_key="k1",
        policy=policy,
    )
    await request(locale="de")
    again = await request(locale="de")
    assert again.replayed
    with pytest.raises(IdempotencyConflict):
        await request(locale="fr")


async def test_a_german_request_is_delivered_in_german_stating_the_links_hour(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        await enqueue(db, keys, "leser@example.com", locale="de-AT", ttl_seconds=3600)
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(lambda s: len(s.of(events.Completed)) >= 1)
    [received] = smtp_server.received
    message = parsed(received.content)
    assert str(message["Subject"]).startswith("Bestätigen Sie Ihre E-Mail-Adresse")
    text = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert text is not None and html is not None
    assert "Der Link ist 60 Minuten gültig" in text.get_content()
    assert '<html lang="de"' in html.get_content()


async def test_claim_v1_still_serves_workers_of_the_previous_release(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys, locale="de")
    rows = await db.fetch(
        "SELECT * FROM notifier.claim_v1($1::bigint[], 'old-worker', 30, 'sweep')",
        [enqueued.outbox_id],
    )
    assert [(r["id"], r["fate"]) for r in rows] == [(enqueued.outbox_id, "send")]
    assert "locale" not in list(rows[0].keys())


async def test_the_api_takes_a_locale_and_refuses_a_malformed_one(
    apps: Clients, db: asyncpg.Connection
) -> None:
    api = apps.internal
    body = {"user_id": "u1", "email": "a@example.com", "locale": "de"}
    accepted = await api.post("/v1/verifications", json=body, headers={"Idempotency-Key": "1"})
    assert accepted.status_code == 202, accepted.text
    body["locale"] = "de<script>"
    refused = await api.post("/v1/verifications", json=body, headers={"Idempotency-Key": "2"})
    assert refused.status_code == 422
    assert refused.json()["error"]["fields"] == ["locale"]
    assert await stored_locales(db) == ["de"]


async def test_a_fresh_link_asked_for_from_an_expired_one_keeps_its_language(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys, "leser@example.com", locale="de")
    token = await link_token(db, keys, enqueued.id)
    await expire_verification(db, enqueued.outbox_id)
    resent = await apps.public.post("/verify/resend", data={"token": token})
    assert resent.status_code == 202, resent.text
    assert await stored_locales(db) == ["de", "de"]
    newest = await db.fetchval(
        "SELECT id FROM notifier.verifications ORDER BY created_at DESC LIMIT 1"
    )
    assert isinstance(newest, uuid.UUID) and newest != enqueued.id


async def test_a_german_links_page_is_german_and_names_the_product_and_the_address(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys, "leser@example.com", locale="de-AT")
    token = await link_token(db, keys, enqueued.id)
    page = await apps.public.get("/verify", params={"token": token})
    assert page.status_code == 200
    assert page.text.startswith("<!doctype html><html lang=de>")
    assert "Bestätigen Sie Ihre E-Mail-Adresse" in page.text
    assert "l***@example.com" in page.text and "leser@example.com" not in page.text
    assert "<p class=product>notifier</p>" in page.text  # NOTIFIER_PRODUCT_NAME's default
    assert "(Registrierung)" in page.text and "signup" not in page.text


async def test_a_german_link_confirms_in_german(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys, "leser@example.com", locale="de")
    token = await link_token(db, keys, enqueued.id)
    done = await apps.public.post("/verify", data={"token": token})
    assert done.status_code == 200 and "data-outcome=verified" in done.text
    assert "<html lang=de>" in done.text and "Ihre E-Mail-Adresse ist bestätigt" in done.text
    again = await apps.public.get("/verify", params={"token": token})
    assert "Diese Adresse ist bereits bestätigt" in again.text


async def test_an_expired_german_link_offers_a_new_one_in_german(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys, "leser@example.com", locale="de")
    token = await link_token(db, keys, enqueued.id)
    await expire_verification(db, enqueued.outbox_id)
    page = await apps.public.get("/verify", params={"token": token})
    assert page.status_code == 410
    assert "Dieser Link ist abgelaufen" in page.text and ">Neuen Link senden</button>" in page.text
    resent = await apps.public.post("/verify/resend", data={"token": token})
    assert "Ein neuer Link ist unterwegs" in resent.text


async def test_a_link_in_a_language_without_words_of_its_own_is_shown_in_english(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    enqueued = await enqueue(db, keys, "reader@example.com", locale="fr")
    page = await apps.public.get(
        "/verify", params={"token": await link_token(db, keys, enqueued.id)}
    )
    assert "<html lang=en>" in page.text and "Confirm your email address" in page.text


async def test_a_token_that_is_not_ours_gets_the_english_page_naming_no_address(
    apps: Clients,
) -> None:
    page = await apps.public.get("/verify", params={"token": "k1.not-a-real-token"})
    assert page.status_code == 400
    assert "<html lang=en>" in page.text and "This link cannot be used" in page.text
    assert "@" not in page.text.split("<body>")[1]


async def test_a_german_email_names_its_purpose_in_german(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        await enqueue(db, keys, "leser@example.com", locale="de")
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(lambda s: len(s.of(events.Completed)) >= 1)
    [received] = smtp_server.received
    text = parsed(received.content).get_body(("plain",))
    assert text is not None
    assert "(Registrierung)" in text.get_content() and "signup" not in text.get_content()
