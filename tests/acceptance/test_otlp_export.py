"""Real processes export one linked trace over OTLP/HTTP to a real receiver."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

import anyio
import asyncpg
import httpx
import pytest

from tests.conftest import TEST_SECRET
from tests.support.apps import bearer, make_key
from tests.support.cli import running_cli
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.smtp_server import SmtpServer

pytestmark = pytest.mark.anyio

WAIT = 30
SERVER, PRODUCER, CONSUMER, CLIENT = 2, 4, 5, 3  # OTLP Span.SpanKind values


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    receiver.start()
    yield receiver
    receiver.stop()


async def test_api_and_worker_export_one_linked_trace_per_verification(
    database_url: str,
    smtp_server: SmtpServer,
    receiver: OtlpReceiver,
    free_tcp_port_factory: Callable[[], int],
    db: asyncpg.Connection,
) -> None:
    port, public_port = free_tcp_port_factory(), free_tcp_port_factory()
    key = await make_key(db, ["request"])
    common = {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
    }
    worker_env = {
        **common,
        "NOTIFIER_SMTP_HOST": smtp_server.host,
        "NOTIFIER_SMTP_PORT": str(smtp_server.port),
        "NOTIFIER_SMTP_TLS": "none",
    }
    async with (
        running_cli("worker", env=worker_env) as worker,
        running_cli(
            "api",
            env={
                **common,
                "NOTIFIER_API_PORT": str(port),
                "NOTIFIER_PUBLIC_PORT": str(public_port),
            },
        ) as api,
    ):
        with anyio.fail_after(WAIT):
            await worker.wait_for_line("delivering (")
            await api.wait_for_line("internal API listening")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            created = await client.post(
                "/v1/verifications",
                json={"user_id": "otel", "email": "otel@example.com"},
                headers={
                    **bearer(key),
                    "Idempotency-Key": "otel-1",
                    "traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01",
                },
            )
            assert created.status_code == 202, created.text
        await smtp_server.wait_for(1, timeout=WAIT)
        for cli in (worker, api):
            cli.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await worker.process.wait() == 0
            assert await api.process.wait() == 0

    spans = receiver.spans
    # The caller's trace, continued from its traceparent header: it proved who it is.
    trace_id = "ab" * 16
    story = [s for s in spans if s.trace_id == trace_id]
    by_name = {s.name: s for s in story}
    served = by_name["POST /v1/verifications"]
    producer = by_name["create notifier.email_outbox"]
    process = by_name["process notifier.email_outbox"]
    send = by_name["send smtp"]
    settle = by_name["settle notifier.email_outbox"]
    assert (served.kind, producer.kind, process.kind, send.kind) == (
        SERVER,
        PRODUCER,
        CONSUMER,
        CLIENT,
    )
    assert served.parent_span_id == "cd" * 8
    assert (served.service, process.service) == ("notifier-api", "notifier-worker")
    assert producer.parent_span_id == served.span_id
    assert process.parent_span_id == producer.span_id
    assert {send.parent_span_id, settle.parent_span_id} == {process.span_id}
    assert send.attributes["notifier.smtp.reply_code"] == 250
    assert settle.attributes["notifier.status"] == "sent"
    batch = [s for s in spans if s.name == "receive notifier.email_outbox"]
    assert any(producer.span_id in s.links for s in batch)
    assert process.links and process.links[0] in {s.span_id for s in batch}
    assert "notifier.claims" in receiver.metric_names
    assert "notifier.outcomes" in receiver.metric_names
