"""Telemetry: OpenTelemetry's providers, configured only by OTEL_* variables, and the spans
one verification's trace is made of (request, claim, process, send, settle). The metric
instruments are in notifier.metrics, the HTTP server spans in notifier.web.spans.

With no OTLP endpoint set, no SDK provider is installed: the API's no-op tracer and meter
cost next to nothing, and spans are not even built (`tracing_enabled()` is false). The HTTP
API always serves Prometheus text on /metrics from its own reader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from notifier.settings_spec import environment
from notifier.version import __version__

log = logging.getLogger(__name__)

SCOPE = "notifier"
MESSAGING_SYSTEM = "postgresql"
DESTINATION = "notifier.email_outbox"
_ENDPOINT_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)
_propagator = TraceContextTextMapPropagator()

tracer = trace.get_tracer(SCOPE, __version__)
meter = metrics.get_meter(SCOPE, __version__)


def tracing_enabled() -> bool:
    """Whether spans are recorded in this process: an SDK tracer provider is installed, by
    `Telemetry.configure` or by an application that embeds notifier and set up its own."""
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def otlp_configured(env: Mapping[str, str]) -> bool:
    disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    return not disabled and any(env.get(name) for name in _ENDPOINT_VARIABLES)


def _protocol(env: Mapping[str, str], signal: str) -> str:
    # The specification's default is http/protobuf; grpc is chosen explicitly.
    return (
        env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()


def _span_exporter(env: Mapping[str, str]) -> Any:
    if _protocol(env, "TRACES") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter()


def _metric_exporter(env: Mapping[str, str]) -> Any:
    if _protocol(env, "METRICS") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter()


@dataclass
class Telemetry:
    """The process's providers, from `configure()` until `shutdown()` (which flushes them)."""

    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    readers: list[MetricReader] = field(default_factory=list)

    @classmethod
    def configure(
        cls, service_name: str, *, prometheus: bool = False, env: Mapping[str, str] | None = None
    ) -> Telemetry:
        """Install providers for what the environment asks for; none when it asks for nothing.

        OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are honoured (Resource.create reads
        them); `service_name` is only the default.
        """
        env = environment() if env is None else env
        telemetry = cls()
        otlp = otlp_configured(env)
        if not otlp and not prometheus:
            return telemetry
        attributes = {"service.version": __version__}
        # Attributes given here win over the environment's, so the default name applies
        # only when the operator named nothing.
        named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        if not named:
            attributes["service.name"] = service_name
        resource = Resource.create(attributes)
        if otlp:
            provider = TracerProvider(resource=resource)
            provider.add_span_processor(BatchSpanProcessor(_span_exporter(env)))
            trace.set_tracer_provider(provider)
            telemetry.tracer_provider = provider
            telemetry.readers.append(PeriodicExportingMetricReader(_metric_exporter(env)))
        if prometheus:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader

            telemetry.readers.append(PrometheusMetricReader())
        telemetry.meter_provider = MeterProvider(
            resource=resource, metric_readers=telemetry.readers
        )
        metrics.set_meter_provider(telemetry.meter_provider)
        log.info(
            "telemetry on: %s%s",
            "OTLP traces and metrics" if otlp else "",
            (" and " if otlp else "") + "Prometheus /metrics" if prometheus else "",
        )
        return telemetry

    def shutdown(self) -> None:
        """Flush and stop; blocking, so call it after the event loop or in a thread."""
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


# -- trace context on the outbox row -----------------------------------------------------------


def inject_current() -> tuple[str | None, str | None]:
    """The current span's W3C traceparent and tracestate, to store on the outbox row."""
    if not tracing_enabled():
        return None, None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent"), carrier.get("tracestate")


def context_of(headers: Mapping[str, str]) -> Context:
    """The trace context an incoming request's headers carry (W3C traceparent/tracestate)."""
    return _propagator.extract(headers)


def extract(traceparent: str | None, tracestate: str | None) -> Context | None:
    """The creation context stored on a row, or None."""
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    return _propagator.extract(carrier)


def link_to(context: Context | None) -> list[Link]:
    if context is None:
        return []
    span_context = trace.get_current_span(context).get_span_context()
    return [Link(span_context)] if span_context.is_valid else []


@contextmanager
def producer_span() -> Iterator[Any]:
    """The outbox write: a PRODUCER span whose context is stored on the row."""
    if not tracing_enabled():
        yield None
        return
    with tracer.start_as_current_span(
        f"create {DESTINATION}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.name": "create",
            "messaging.operation.type": "create",
            "messaging.destination.name": DESTINATION,
            "db.system.name": "postgresql",
        },
    ) as span:
        yield span


# -- the worker's spans --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimTrace:
    """The batch claim a row came from: its span (when tracing) and the statement's timing."""

    span_context: trace.SpanContext | None
    started_ns: int
    ended_ns: int


def record_claim_batch(
    rows: list[Any], discovered_by: str, owner: str, started_ns: int, ended_ns: int, traced: bool
) -> ClaimTrace:
    """A CLIENT span for one claim statement, linked to every row's creation context.

    `traced` is `tracing_enabled()` as the caller read it once: asking OpenTelemetry for the
    provider reads the environment on every call while none is set, which cost a worker a
    fifth of its time per delivery.
    """
    if not traced or not rows:
        return ClaimTrace(None, started_ns, ended_ns)
    links: list[Link] = []
    for row in rows:
        for link in link_to(extract(row.traceparent, row.tracestate)):
            links.append(Link(link.context, {"messaging.message.id": str(row.id)}))
    span = tracer.start_span(
        f"receive {DESTINATION}",
        kind=SpanKind.CLIENT,
        links=links,
        start_time=started_ns,
        attributes={
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.name": "receive",
            "messaging.operation.type": "receive",
            "messaging.destination.name": DESTINATION,
            "messaging.batch.message_count": len(rows),
            "db.system.name": "postgresql",
            "notifier.discovered_by": discovered_by,
            "notifier.lease_owner": owner,
        },
    )
    span.end(end_time=ended_ns)
    return ClaimTrace(span.get_span_context(), started_ns, ended_ns)


# What a span context manager is when nothing is recorded: reusable, and no generator is
# made, entered and closed for it on every delivery.
NO_SPAN: AbstractContextManager[None] = nullcontext()


def process_span(
    row: Any, claim: ClaimTrace, owner: str, traced: bool
) -> AbstractContextManager[Any]:
    """One attempt at one row, continuing the trace of the request that created it.

    A CONSUMER span whose parent is the row's creation context (so every attempt of a
    verification sits in the verification's trace), linked to the batch claim span, with the
    row's claim as its first child.
    """
    return _process_span(row, claim, owner) if traced else NO_SPAN


@contextmanager
def _process_span(row: Any, claim: ClaimTrace, owner: str) -> Iterator[Any]:
    attributes = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": DESTINATION,
        "messaging.message.id": str(row.id),
        "notifier.verification_id": str(row.verification_id),
        "notifier.attempt": row.attempt,
        "notifier.lease_owner": owner,
        "notifier.discovered_by": row.discovered_by,
    }
    links = [Link(claim.span_context)] if claim.span_context is not None else []
    with tracer.start_as_current_span(
        f"process {DESTINATION}",
        context=extract(row.traceparent, row.tracestate) or Context(),
        kind=SpanKind.CONSUMER,
        links=links,
        start_time=claim.started_ns,
        attributes=attributes,
    ) as span:
        claimed = tracer.start_span(
            f"claim {DESTINATION}",
            kind=SpanKind.CLIENT,
            start_time=claim.started_ns,
            attributes={
                "db.system.name": "postgresql",
                "db.operation.name": "UPDATE",
                "db.collection.name": DESTINATION,
                "notifier.attempt": row.attempt,
                "notifier.lease_owner": owner,
                "notifier.discovered_by": row.discovered_by,
            },
        )
        claimed.end(end_time=claim.ended_ns)
        yield span


def child_span(name: str, attributes: Mapping[str, Any]) -> AbstractContextManager[Any]:
    """A CLIENT span under the current one (send, settle); nothing under a span that is not
    being recorded (tracing off), which is cheaper to ask than whether tracing is on."""
    if not trace.get_current_span().is_recording():
        return NO_SPAN
    return tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=dict(attributes))
