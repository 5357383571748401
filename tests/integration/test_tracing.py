"""One trace tells one verification's story: request, outbox write, claim, send, settle."""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator

import anyio
import asyncpg
import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from notifier import events
from notifier.metrics import QueueHealth, WorkerMetrics
from notifier.storage.stats import queue_figures
from notifier.tokens import TokenKeys
from tests.support.apps import Clients, serve
from tests.support.deliveries import policy_for_tests
from tests.support.fixtures import Otel
from tests.support.recorder import Recorder
from tests.support.smtp_server import Fault, SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 15
EMAIL = "trace.me@example.com"


@pytest.fixture
async def apps(otel: Otel, pool: asyncpg.Pool, keys: TokenKeys) -> AsyncIterator[Clients]:
    async with serve(pool, policy_for_tests(keys)) as clients:
        yield clients


@pytest.fixture
def client(apps: Clients) -> httpx.AsyncClient:
    return apps.internal


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    [span] = by_name(spans, name)
    return span


async def deliver(
    client: httpx.AsyncClient,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    recorder: Recorder,
    sent: int = 1,
) -> str:
    async with running_worker(database_url, keys, smtp_server.settings(), recorder=recorder):
        response = await client.post(
            "/v1/verifications",
            json={"user_id": "u-trace", "email": EMAIL},
            headers={"Idempotency-Key": "trace-1"},
        )
        assert response.status_code == 202
        with anyio.fail_after(WAIT):
            await recorder.wait_for(
                lambda s: sum(e.status == "sent" for e in s.of(events.Completed)) >= sent
            )
    return str(response.json()["id"])


async def test_one_trace_runs_from_the_request_through_claim_send_and_settle(
    otel: Otel,
    client: httpx.AsyncClient,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
) -> None:
    verification_id = await deliver(client, database_url, keys, smtp_server, Recorder())
    spans = list(otel.spans.get_finished_spans())
    server = one(spans, "POST /v1/verifications")
    producer = one(spans, "create notifier.email_outbox")
    process = one(spans, "process notifier.email_outbox")
    claim = one(spans, "claim notifier.email_outbox")
    send = one(spans, "send smtp")
    settle = one(spans, "settle notifier.email_outbox")
    batch = [
        s
        for s in by_name(spans, "receive notifier.email_outbox")
        if any(link.context.span_id == producer.context.span_id for link in s.links)
    ]
    assert len(batch) == 1

    assert (server.kind, producer.kind, process.kind) == (
        SpanKind.SERVER,
        SpanKind.PRODUCER,
        SpanKind.CONSUMER,
    )
    trace_id = server.context.trace_id
    assert {s.context.trace_id for s in (producer, process, claim, send, settle)} == {trace_id}
    assert producer.parent is not None and producer.parent.span_id == server.context.span_id
    assert process.parent is not None and process.parent.span_id == producer.context.span_id
    for child in (claim, send, settle):
        assert child.parent is not None and child.parent.span_id == process.context.span_id
    assert [link.context.span_id for link in process.links] == [batch[0].context.span_id]

    assert process.attributes is not None and send.attributes is not None
    assert process.attributes["messaging.system"] == "postgresql"
    assert process.attributes["notifier.verification_id"] == verification_id
    assert process.attributes["notifier.attempt"] == 1
    assert process.attributes["notifier.discovered_by"] == "notify"
    assert process.attributes["notifier.outcome"] == "sent"
    assert str(process.attributes["notifier.lease_owner"]).startswith("test:")
    assert send.attributes["notifier.smtp.reply_code"] == 250
    assert send.attributes["server.port"] == smtp_server.port
    assert settle.attributes is not None and settle.attributes["notifier.status"] == "sent"
    assert server.attributes is not None and server.attributes["http.response.status_code"] == 202


async def test_every_attempt_of_a_retried_delivery_stays_in_its_trace(
    otel: Otel,
    client: httpx.AsyncClient,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
) -> None:
    smtp_server.plan(EMAIL, Fault.RCPT_4XX)
    await deliver(client, database_url, keys, smtp_server, Recorder())
    spans = list(otel.spans.get_finished_spans())
    processes = by_name(spans, "process notifier.email_outbox")
    attempts = [(s.attributes or {})["notifier.attempt"] for s in processes]
    assert sorted(attempts, key=str) == [1, 2]
    assert len({s.context.trace_id for s in processes}) == 1
    failed = next(s for s in processes if (s.attributes or {})["notifier.attempt"] == 1)
    assert (failed.attributes or {})["error.type"] == "transient"


async def test_no_span_carries_a_token_or_an_address(
    otel: Otel,
    client: httpx.AsyncClient,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
) -> None:
    await deliver(client, database_url, keys, smtp_server, Recorder())
    body = smtp_server.received[0].content.decode()
    mac = body.split("token=", 1)[1][9:52]
    for span in otel.spans.get_finished_spans():
        values = " ".join(str(v) for v in (span.attributes or {}).values())
        assert mac not in values and EMAIL not in values, span.name


async def test_a_link_opened_in_a_browser_leaves_no_token_on_its_span(
    otel: Otel, apps: Clients
) -> None:
    token = "0123abcd." + "T" * 43
    await apps.public.get("/verify", params={"token": token})
    [span] = by_name(list(otel.spans.get_finished_spans()), "GET /verify")
    values = " ".join(str(v) for v in (span.attributes or {}).values())
    assert "T" * 43 not in values


@pytest.mark.parametrize("listener", ["public", "internal"])
async def test_a_spans_attributes_name_the_route_never_the_raw_path(
    otel: Otel, apps: Clients, listener: str
) -> None:
    # A stranger picks the path, and its length, before any key is checked.
    client = apps.public if listener == "public" else apps.internal
    otel.spans.clear()
    assert (await client.get("/" + "a" * 60_000)).status_code == 404
    assert (await client.get("/verify/" + "ada@example.com")).status_code == 404
    await client.get("/healthz")
    spans = list(otel.spans.get_finished_spans())
    values = [str(v) for span in spans for v in (span.attributes or {}).values()]
    assert not any("aaaa" in v or "example.com" in v for v in values), values
    healthz = [s for s in spans if (s.attributes or {}).get("http.route") == "/healthz"]
    assert [s.name for s in healthz] == ["GET /healthz"]


async def test_metrics_page_shows_queue_health_and_worker_counts(
    otel: Otel,
    client: httpx.AsyncClient,
    pool: asyncpg.Pool,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
) -> None:
    recorder = Recorder(then=WorkerMetrics())
    await deliver(client, database_url, keys, smtp_server, recorder)
    health = QueueHealth(functools.partial(queue_figures, pool))
    health.register_gauges()
    await health.sample()
    text = (await client.get("/metrics")).text
    for pattern in (
        r"notifier_queue_pending\{",
        r"notifier_queue_expired_leases\{",
        r"notifier_queue_oldest_pending_age_seconds\{",
        r"notifier_postgres_notification_queue_usage(_ratio)?\{",
        r'notifier_claims_total\{[^}]*discovered_by="notify"',
        r'notifier_outcomes_total\{[^}]*outcome="sent"',
        r"notifier_smtp_duration_seconds_bucket\{",
        r"notifier_notify_to_claim_duration_seconds_bucket\{",
        r"notifier_delivery_attempts_bucket\{",
    ):
        assert re.search(pattern, text), pattern


CALLER_TRACE = "ab" * 16
CALLER_PARENT = {"traceparent": f"00-{CALLER_TRACE}-{'cd' * 8}-01"}


def server_span(otel: Otel, name: str) -> ReadableSpan:
    return one(list(otel.spans.get_finished_spans()), name)


async def test_an_authenticated_callers_trace_is_continued(
    otel: Otel, client: httpx.AsyncClient
) -> None:
    await client.get("/healthz", headers=CALLER_PARENT)
    span = server_span(otel, "GET /healthz")
    assert format(span.context.trace_id, "032x") == CALLER_TRACE


async def test_an_unauthenticated_callers_trace_is_not_continued(
    otel: Otel, client: httpx.AsyncClient
) -> None:
    response = await client.get(
        "/healthz", headers={**CALLER_PARENT, "Authorization": "Bearer nfk_forged"}
    )
    assert response.status_code == 200
    span = server_span(otel, "GET /healthz")
    assert format(span.context.trace_id, "032x") != CALLER_TRACE
    assert span.parent is None


async def test_the_public_listener_starts_a_new_trace_linked_to_the_callers(
    otel: Otel, apps: Clients
) -> None:
    await apps.public.get("/verify", params={"token": "x"}, headers=CALLER_PARENT)
    span = server_span(otel, "GET /verify")
    assert span.parent is None and format(span.context.trace_id, "032x") != CALLER_TRACE
    assert [format(link.context.trace_id, "032x") for link in span.links] == [CALLER_TRACE]
