"""Amazon SES through SNS on the public listener: a signed notification is believed and
applied; anything unsigned, tampered, of another topic or from another certificate host is
refused before anything is fetched or written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import orjson
import pytest

from notifier import verp
from notifier.config import InboundSettings
from notifier.tokens import TokenKeys
from notifier.web.listeners import Services
from notifier.web.public import create_public_app
from tests.support.deliveries import Enqueued, enqueue, policy_for_tests
from tests.support.sns import (
    TOPIC,
    CertificateServer,
    Signer,
    bounce_event,
    certificate_server,
    notification,
)

pytestmark = pytest.mark.anyio

DOMAIN = "bounces.example.com"
SIGNER = Signer.new()


@pytest.fixture
async def sns() -> AsyncIterator[CertificateServer]:
    async with certificate_server(SIGNER.certificate_pem) as served:
        yield served


@pytest.fixture
async def public(
    pool: asyncpg.Pool, keys: TokenKeys, sns: CertificateServer
) -> AsyncIterator[httpx.AsyncClient]:
    inbound = InboundSettings(ses_topics=(TOPIC,), sns_certificate_urls=(sns.url,))
    services = Services.over(
        pool,
        policy_for_tests(keys),
        inbound=inbound,
        bounce_domain=DOMAIN,
        suppression_seconds=86400.0,
    )
    app = create_public_app(services)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8001"
    ) as client:
        yield client


async def sent(db: asyncpg.Connection, keys: TokenKeys) -> Enqueued:
    row = await enqueue(db, keys, "ada@example.org")
    await db.execute(
        "UPDATE notifier.email_outbox SET status = 'sent', last_outcome = 'sent', attempts = 1, "
        "completed_at = now() WHERE id = $1",
        row.outbox_id,
    )
    return row


async def post(client: httpx.AsyncClient, message: dict[str, str]) -> httpx.Response:
    return await client.post(
        "/inbound/ses",
        content=orjson.dumps(message),
        headers={
            "Content-Type": "text/plain; charset=UTF-8",
            "x-amz-sns-message-type": message["Type"],
        },
    )


async def status_of(db: asyncpg.Connection, row: Enqueued) -> str:
    return str(
        await db.fetchval("SELECT status FROM notifier.email_outbox WHERE id = $1", row.outbox_id)
    )


async def test_a_signed_bounce_marks_its_delivery_bounced_and_suppresses_the_address(
    db: asyncpg.Connection, keys: TokenKeys, public: httpx.AsyncClient, sns: CertificateServer
) -> None:
    row = await sent(db, keys)
    source = verp.return_path(keys, row.outbox_id, DOMAIN)
    message = SIGNER.sign(notification(bounce_event(source, "<x@y>"), f"{sns.url}/cert.pem"))
    answer = await post(public, message)
    assert answer.status_code == 200, answer.text
    assert await status_of(db, row) == "bounced"
    assert await db.fetchval("SELECT email FROM notifier.suppressed_addresses") == "ada@example.org"


async def test_a_delivery_without_a_return_path_of_ours_is_found_by_its_message_id(
    db: asyncpg.Connection, keys: TokenKeys, public: httpx.AsyncClient, sns: CertificateServer
) -> None:
    row = await sent(db, keys)
    message_id = await db.fetchval(
        "SELECT message_id FROM notifier.email_outbox WHERE id = $1", row.outbox_id
    )
    event = bounce_event("noreply@app.example.com", message_id)
    assert (
        await post(public, SIGNER.sign(notification(event, f"{sns.url}/c.pem")))
    ).status_code == 200
    assert await status_of(db, row) == "bounced"


async def test_a_tampered_message_is_refused_and_changes_nothing(
    db: asyncpg.Connection, keys: TokenKeys, public: httpx.AsyncClient, sns: CertificateServer
) -> None:
    row = await sent(db, keys)
    source = verp.return_path(keys, row.outbox_id, DOMAIN)
    message = SIGNER.sign(notification(bounce_event(source, "<x@y>"), f"{sns.url}/cert.pem"))
    message["Message"] = message["Message"].replace("5.1.1", "5.2.1")
    answer = await post(public, message)
    assert answer.status_code == 403
    assert await status_of(db, row) == "sent"
    assert await db.fetchval("SELECT count(*) FROM notifier.delivery_reports") == 0


async def test_a_message_signed_by_another_key_is_refused(
    db: asyncpg.Connection, keys: TokenKeys, public: httpx.AsyncClient, sns: CertificateServer
) -> None:
    row = await sent(db, keys)
    source = verp.return_path(keys, row.outbox_id, DOMAIN)
    forged = Signer.new().sign(notification(bounce_event(source, "<x@y>"), f"{sns.url}/c.pem"))
    assert (await post(public, forged)).status_code == 403
    assert await status_of(db, row) == "sent"


async def test_another_topic_is_refused_before_any_certificate_is_fetched(
    db: asyncpg.Connection, keys: TokenKeys, public: httpx.AsyncClient, sns: CertificateServer
) -> None:
    row = await sent(db, keys)
    source = verp.return_path(keys, row.outbox_id, DOMAIN)
    other = "arn:aws:sns:eu-west-1:999999999999:someone-else"
    message = SIGNER.sign(notification(bounce_event(source, "<x@y>"), f"{sns.url}/c.pem", other))
    assert (await post(public, message)).status_code == 403
    assert sns.requests == []


@pytest.mark.parametrize(
    "cert_url",
    [
        "http://127.0.0.2:9/cert.pem",  # not trusted, not an SNS host
        "https://sns.eu-west-1.amazonaws.com.evil.example/cert.pem",
        "https://user@sns.eu-west-1.amazonaws.com/cert.pem",
        "https://sns.eu-west-1.amazonaws.com/cert.txt",
        "https://sns.eu-west-1.amazonaws.com:99999/cert.pem",  # a port out of range
        "https://sns.eu-west-1.amazonaws.com:x/cert.pem",  # a port that is no number
    ],
)
async def test_a_certificate_off_the_sns_hosts_is_never_fetched(
    public: httpx.AsyncClient, sns: CertificateServer, cert_url: str
) -> None:
    message = SIGNER.sign(notification(bounce_event("x@y", "<x@y>"), cert_url))
    assert (await post(public, message)).status_code == 403
    assert sns.requests == []


async def test_signature_version_1_is_refused(
    public: httpx.AsyncClient, sns: CertificateServer
) -> None:
    message = SIGNER.sign(notification(bounce_event("x@y", "<x@y>"), f"{sns.url}/c.pem"))
    message["SignatureVersion"] = "1"
    assert (await post(public, message)).status_code == 403


async def test_a_message_from_hours_ago_is_refused(
    public: httpx.AsyncClient, sns: CertificateServer
) -> None:
    old = (datetime.now(UTC) - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    message = notification(bounce_event("x@y", "<x@y>"), f"{sns.url}/c.pem")
    message["Timestamp"] = old
    assert (await post(public, SIGNER.sign(message))).status_code == 403


async def test_a_subscription_is_confirmed_by_its_subscribe_url(
    public: httpx.AsyncClient, sns: CertificateServer
) -> None:
    message = {
        "Type": "SubscriptionConfirmation",
        "MessageId": "m1",
        "Token": "t" * 40,
        "TopicArn": TOPIC,
        "Message": "You have chosen to subscribe",
        "SubscribeURL": f"{sns.url}/?Action=ConfirmSubscription&Token=abc",
        "Timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "SigningCertURL": f"{sns.url}/c.pem",
    }
    answer = await post(public, SIGNER.sign(message))
    assert answer.status_code == 200 and answer.json() == {"result": "subscribed"}
    assert any("Action=ConfirmSubscription" in r for r in sns.requests)


async def test_a_body_that_is_not_an_sns_message_is_refused(public: httpx.AsyncClient) -> None:
    for body in (b"not json", b"[]", b'{"Type": "Notification", "MessageId": 5}'):
        answer = await public.post("/inbound/ses", content=body)
        assert answer.status_code == 403
