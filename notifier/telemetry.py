"""Telemetry: traces and metrics through OpenTelemetry, configured only by OTEL_* variables.

With no OTLP endpoint set, no SDK provider is installed: the API's no-op tracer and meter
cost next to nothing, and spans are not even built (`tracing_enabled()` is false). The HTTP
API always serves Prometheus text on /metrics from its own reader.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
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

from notifier import events
from notifier.events import WorkerEvent
from notifier.outcomes import TERMINAL
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


@contextmanager
def process_span(row: Any, claim: ClaimTrace, owner: str, traced: bool) -> Iterator[Any]:
    """One attempt at one row, continuing the trace of the request that created it.

    A CONSUMER span whose parent is the row's creation context (so every attempt of a
    verification sits in the verification's trace), linked to the batch claim span, with the
    row's claim as its first child.
    """
    if not traced:
        yield None
        return
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


@contextmanager
def child_span(name: str, attributes: dict[str, Any]) -> Iterator[Any]:
    """A CLIENT span under the current one (send, settle); nothing under a span that is not
    being recorded (tracing off), which is cheaper to ask than whether tracing is on."""
    if not trace.get_current_span().is_recording():
        yield None
        return
    with tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield span


# -- the API's server spans -------------------------------------------------------------------


class ServerSpans:
    """ASGI middleware: one SERVER span per HTTP request.

    An incoming traceparent is continued only when `trust_incoming(scope)` says the caller
    proved who it is (an authenticated internal client); anyone else's starts a new trace,
    linked to theirs, so a stranger cannot graft spans onto our traces or pick trace ids.
    The span names the route template, never the raw URL or path: a query string can hold a
    token, a path an address, and a stranger chooses both (and their length), before any key
    is checked. What a span needs is which route answered.
    """

    def __init__(self, app: Any, trust_incoming: Callable[[Any], bool] | None = None) -> None:
        self.app = app
        self.trust_incoming = trust_incoming

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not tracing_enabled():
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        incoming = _propagator.extract(headers)
        links: list[Link] = []
        if self.trust_incoming is not None and self.trust_incoming(scope):
            parent = incoming
        else:
            parent, links = Context(), link_to(incoming)
        method = scope["method"]
        status: dict[str, int] = {}

        async def tracked(message: Any) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        with tracer.start_as_current_span(
            method,
            context=parent,
            kind=SpanKind.SERVER,
            links=links,
            attributes={
                "http.request.method": method,
                "url.scheme": scope.get("scheme", "http"),
                "network.protocol.version": scope.get("http_version", "1.1"),
            },
        ) as span:
            try:
                await self.app(scope, receive, tracked)
            finally:
                route = scope.get("route")
                template = getattr(route, "path", None)
                if template:
                    span.update_name(f"{method} {template}")
                    span.set_attribute("http.route", template)
                code = status.get("code", 500)
                span.set_attribute("http.response.status_code", code)
                if code >= 500:
                    span.set_attribute("error.type", str(code))
                    span.set_status(trace.Status(trace.StatusCode.ERROR))


# -- metrics ----------------------------------------------------------------------------------

# Seconds; from sub-millisecond claims to multi-second SMTP replies.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 7, 10)


class WorkerMetrics:
    """Turns a worker's events into OpenTelemetry instruments (no-ops without a provider)."""

    def __init__(self) -> None:
        self.claims = meter.create_counter(
            "notifier.claims",
            unit="{row}",
            description="Rows claimed, by how they were discovered (notify, sweep, retry_timer, "
            "expired_lease, poll); a rising sweep share means notifications are being lost",
        )
        self.outcomes = meter.create_counter(
            "notifier.outcomes",
            unit="{attempt}",
            description="Attempt outcomes by kind (sent, transient, permanent, unknown, "
            "expired, superseded, verified, lease_lost)",
        )
        self.attempts = meter.create_histogram(
            "notifier.delivery.attempts",
            unit="{attempt}",
            description="Attempts a delivery took, recorded when it ends",
            explicit_bucket_boundaries_advisory=list(ATTEMPT_BUCKETS),
        )
        self.smtp_duration = meter.create_histogram(
            "notifier.smtp.duration",
            unit="s",
            description="Time to hand one message to the SMTP server",
            explicit_bucket_boundaries_advisory=list(LATENCY_BUCKETS),
        )
        self.notify_to_claim = meter.create_histogram(
            "notifier.notify_to_claim.duration",
            unit="s",
            description="From a notification arriving to its row being claimed",
            explicit_bucket_boundaries_advisory=list(LATENCY_BUCKETS),
        )
        self.stale_completions = meter.create_counter(
            "notifier.stale_completions",
            unit="{attempt}",
            description="Completions that found their lease gone and changed nothing",
        )
        self.listener_reconnects = meter.create_counter(
            "notifier.listener.reconnects",
            unit="{reconnect}",
            description="LISTEN connections lost and replaced",
        )
        self.configuration_problems = meter.create_counter(
            "notifier.configuration_problems",
            unit="{attempt}",
            description="Deliveries refused for our side's reasons (sender refused, policy or "
            "content rejection): failed, recipients not suppressed; fix the configuration",
        )
        self.deferrals = meter.create_counter(
            "notifier.domain_deferrals",
            unit="{row}",
            description="Rows handed back because their recipient domain already held its "
            "share of the send slots (NOTIFIER_DOMAIN_CONCURRENCY): a slow or busy domain",
        )
        self.unknown_token_keys = meter.create_counter(
            "notifier.unknown_token_keys",
            unit="{attempt}",
            description="Deliveries whose link was made with a secret this worker lacks "
            "(retried until the link expires): give every worker the API's secrets",
        )

    def notice(self, event: WorkerEvent) -> None:
        match event:
            case events.Claimed(discovered_by=discovered_by, waited=waited):
                self.claims.add(1, {"discovered_by": discovered_by})
                if waited is not None and discovered_by == "notify":
                    self.notify_to_claim.record(waited)
            case events.Completed(outcome=outcome, status=status, attempt=attempt):
                self.outcomes.add(1, {"outcome": outcome})
                if event.smtp_seconds is not None:
                    self.smtp_duration.record(event.smtp_seconds)
                if status in TERMINAL:
                    self.attempts.record(attempt)
            case events.Settled(fate=fate):
                self.outcomes.add(1, {"outcome": "expired" if fate == "exhausted" else fate})
            case events.StaleCompletion():
                self.stale_completions.add(1)
            case events.ListenerLost():
                self.listener_reconnects.add(1)
            case events.ConfigurationProblem():
                self.configuration_problems.add(1)
            case events.UnknownTokenKey():
                self.unknown_token_keys.add(1)
            case events.Deferred():
                self.deferrals.add(1)
            case _:
                pass  # the other events are not counted


@dataclass
class QueueHealth:
    """The queue's health as the database sees it, sampled by `run()` for gauges to read.

    Gauge callbacks run on the metric reader's thread and cannot query asyncpg, so a task
    samples every `interval` seconds and the callbacks read the last sample.
    """

    pool: Any
    interval: float = 15.0
    latest: dict[str, float] = field(default_factory=dict)

    async def sample(self) -> dict[str, float]:
        from notifier.queries import sql

        row = await self.pool.fetchrow(sql("queue_health"))
        self.latest = {key: float(value or 0) for key, value in dict(row).items()}
        return self.latest

    async def run(self) -> None:
        import anyio

        while True:
            try:
                await self.sample()
            except Exception as exc:
                log.warning("queue health sample failed: %s", exc)
            await anyio.sleep(self.interval)

    def register_gauges(self) -> None:
        _register_queue_gauges(self)


_gauge_source: QueueHealth | None = None


def _register_queue_gauges(source: QueueHealth) -> None:
    """Observable gauges are registered once per process; later sources replace the first."""
    global _gauge_source
    first = _gauge_source is None
    _gauge_source = source
    if not first:
        return

    def reading(key: str) -> Any:
        def callback(options: Any) -> list[metrics.Observation]:
            value = None if _gauge_source is None else _gauge_source.latest.get(key)
            return [] if value is None else [metrics.Observation(value)]

        return callback

    gauges = {
        "pending": ("notifier.queue.pending", "{row}", "Pending rows (due or scheduled)"),
        "sending": ("notifier.queue.sending", "{row}", "Rows under a lease"),
        "expired_leases": (
            "notifier.queue.expired_leases",
            "{row}",
            "Sending rows whose lease ran out (their worker died); the sweep reclaims them",
        ),
        "oldest_pending_seconds": (
            "notifier.queue.oldest_pending_age",
            "s",
            "How long the oldest due pending row has waited",
        ),
        "notification_queue_usage": (
            "notifier.postgres.notification_queue_usage",
            "1",
            "Fraction of PostgreSQL's NOTIFY queue in use (pg_notification_queue_usage)",
        ),
    }
    for key, (name, unit, description) in gauges.items():
        meter.create_observable_gauge(
            name, callbacks=[reading(key)], unit=unit, description=description
        )
