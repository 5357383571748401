"""Metrics: the worker's instruments and the queue's gauges, through OpenTelemetry's meter.

No-ops without a meter provider (telemetry.Telemetry installs one when OTLP or Prometheus is
asked for). The worker's events become counters and histograms (WorkerMetrics); the
queue's health, sampled from the database, is read by observable gauges (QueueHealth).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from opentelemetry import metrics

from notifier import events
from notifier.events import WorkerEvent
from notifier.outcomes import TERMINAL
from notifier.telemetry import meter

log = logging.getLogger(__name__)

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


class _Attributes:
    """One attribute set per value, made once and shared by every measurement (the SDK is
    handed the same mapping each time instead of a new dict per delivery)."""

    def __init__(self, key: str) -> None:
        self._key = key
        self._made: dict[str, Mapping[str, str]] = {}

    def __call__(self, value: str) -> Mapping[str, str]:
        made = self._made.get(value)
        if made is None:
            made = self._made[value] = {self._key: value}
        return made


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
            description="Attempt outcomes by kind (sent, transient, throttled, permanent, unknown, "
            "expired, superseded, verified, lease_lost)",
        )
        self.send_rate = meter.create_gauge(
            "notifier.send_rate",
            unit="{message}/s",
            description="The fleet's send rate in force (NOTIFIER_SEND_RATE, or less after the "
            "provider throttled), as this worker last read it",
        )
        self.sending_paused = meter.create_gauge(
            "notifier.sending_paused",
            unit="1",
            description="1 while the provider's daily quota is spent and every worker waits "
            "for its window to roll over, else 0",
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
        self.webhook_attempts = meter.create_counter(
            "notifier.webhook.attempts",
            unit="{attempt}",
            description="Webhook requests by outcome (delivered, failed, unknown, gone, "
            "throttled, refused)",
        )
        self.webhook_duration = meter.create_histogram(
            "notifier.webhook.duration",
            unit="s",
            description="Time one webhook request took, connecting to the answer",
            explicit_bucket_boundaries_advisory=list(LATENCY_BUCKETS),
        )
        self.webhook_endpoints_disabled = meter.create_counter(
            "notifier.webhook.endpoints_disabled",
            unit="{endpoint}",
            description="Webhook endpoints disabled (410 Gone, or failing for "
            "NOTIFIER_WEBHOOK_DISABLE_AFTER): `notifier webhooks enable` once it is fixed",
        )
        self.unknown_token_keys = meter.create_counter(
            "notifier.unknown_token_keys",
            unit="{attempt}",
            description="Deliveries whose link was made with a secret this worker lacks "
            "(retried until the link expires): give every worker the API's secrets",
        )

        self._discovered_by = _Attributes("discovered_by")
        self._outcome = _Attributes("outcome")
        # Events that only count (one each), by kind.
        self._counted: dict[type, Any] = {
            events.StaleCompletion: self.stale_completions,
            events.ListenerLost: self.listener_reconnects,
            events.ConfigurationProblem: self.configuration_problems,
            events.UnknownTokenKey: self.unknown_token_keys,
            events.Deferred: self.deferrals,
            events.WebhookEndpointDisabled: self.webhook_endpoints_disabled,
        }

    def notice(self, event: WorkerEvent) -> None:
        counter = self._counted.get(type(event))
        if counter is not None:
            counter.add(1)
            return
        match event:
            case events.Claimed(discovered_by=discovered_by, waited=waited):
                self.claims.add(1, self._discovered_by(discovered_by))
                if waited is not None and discovered_by == "notify":
                    self.notify_to_claim.record(waited)
            case events.Completed(outcome=outcome, status=status, attempt=attempt):
                self.outcomes.add(1, self._outcome(outcome))
                if event.smtp_seconds is not None:
                    self.smtp_duration.record(event.smtp_seconds)
                if status in TERMINAL:
                    self.attempts.record(attempt)
            case events.Settled(fate=fate):
                self.outcomes.add(1, self._outcome("expired" if fate == "exhausted" else fate))
            case events.SendPaused(until=until):
                self.sending_paused.set(0 if until is None else 1)
            case events.SendRateChanged(rate=rate, configured=configured):
                self.send_rate.set(rate, {"configured": configured})
            case events.WebhookAttempted(outcome=outcome, seconds=seconds):
                self.webhook_attempts.add(1, self._outcome(outcome))
                self.webhook_duration.record(seconds)
            case _:
                pass  # the other events are not counted


@dataclass
class QueueHealth:
    """The queue's health as the database sees it, sampled by `run()` for gauges to read.

    Gauge callbacks run on the metric reader's thread and cannot query asyncpg, so a task
    samples every `interval` seconds and the callbacks read the last sample.
    """

    # Reads the figures from the database (storage.stats.queue_figures over a pool).
    read: Callable[[], Awaitable[Mapping[str, float]]]
    interval: float = 15.0
    latest: dict[str, float] = field(default_factory=dict)

    async def sample(self) -> dict[str, float]:
        self.latest = dict(await self.read())
        return self.latest

    async def run(self) -> None:
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
