"""Shared fixtures that need more than a database (registered from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.smtp_server import SmtpServer


@pytest.fixture
def smtp_server(free_tcp_port_factory: Callable[[], int]) -> Iterator[SmtpServer]:
    """A real SMTP server of this test's own, accepting everything until told otherwise."""
    with SmtpServer(free_tcp_port_factory()) as server:
        yield server


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
