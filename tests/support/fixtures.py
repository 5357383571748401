"""Shared fixtures that need more than a database (registered from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from notifier.tokens import TokenKeys
from tests.support.apps import Clients, serve
from tests.support.deliveries import policy_for_tests
from tests.support.smtp_server import SmtpServer


@pytest.fixture
def smtp_server(free_tcp_port_factory: Callable[[], int]) -> Iterator[SmtpServer]:
    """A real SMTP server of this test's own, accepting everything until told otherwise."""
    with SmtpServer(free_tcp_port_factory()) as server:
        yield server


@pytest.fixture
def policy_overrides() -> dict[str, Any]:
    """Request policy fields (or limits) the `apps` of a test use: parametrize to change."""
    return {}


@pytest.fixture
async def apps(
    pool: asyncpg.Pool, keys: TokenKeys, policy_overrides: dict[str, Any]
) -> AsyncIterator[Clients]:
    """Both listeners on a real port each, over the test's database; the internal client
    presents a key with every scope."""
    async with serve(pool, policy_for_tests(keys, **policy_overrides)) as clients:
        yield clients


@dataclass
class Otel:
    """The SDK providers installed for this test session, and what they recorded."""

    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader


_installed: Otel | None = None


@pytest.fixture
def otel() -> Otel:
    """Tracing and metrics on, recorded in memory. Global providers can be set only once per
    process, so the first test that asks installs them for the rest of the session."""
    global _installed
    if _installed is None:
        spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        trace.set_tracer_provider(provider)
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader, PrometheusMetricReader()]))
        _installed = Otel(spans, reader)
    _installed.spans.clear()
    return _installed
