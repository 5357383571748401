"""What a running worker tells: one typed event per step that matters.

The worker (and its listener) hand each event to an `Observer`. Production observers are
the metrics (metrics.WorkerMetrics), fanned out by `Events`, which keeps nothing; the
test suite's Recorder keeps every event and lets a test await the one it needs instead of
sleeping (River's test signals). Events are small frozen dataclasses, so mypy checks every
field an observer reads.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from notifier.outcomes import AttemptOutcome, DeliveryStatus, Discovery, Fate
from notifier.webhook_outcomes import AttemptOutcome as WebhookOutcome
from notifier.webhook_outcomes import DeliveryStatus as WebhookStatus

# -- the worker's life --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerStarted:
    owner: str


@dataclass(frozen=True, slots=True)
class WorkerStopped:
    owner: str


# -- finding and claiming work ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claimed:
    """A row this worker now holds under a lease."""

    owner: str
    id: int
    discovered_by: Discovery
    attempt: int
    # Seconds from the notification (or timer) naming it to its claim; None for a sweep.
    waited: float | None
    # The verification it delivers, so an observer can name it as the API does.
    verification_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Swept:
    owner: str
    reason: Discovery
    claimed: int


@dataclass(frozen=True, slots=True)
class Settled:
    """A row the claim settled on the spot without sending (expired, superseded, ...)."""

    id: int
    fate: Fate


@dataclass(frozen=True, slots=True)
class ClaimFailed:
    error: str


# -- sending and completing --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Completed:
    """An attempt recorded while its lease was held: the row's new status."""

    owner: str
    id: int
    outcome: AttemptOutcome
    status: DeliveryStatus | None
    attempt: int
    smtp_seconds: float | None
    # The mail server's reply as stored (addresses redacted), e.g. "250 2.0.0 Ok".
    reply: str | None = None


@dataclass(frozen=True, slots=True)
class StaleCompletion:
    """An attempt that found its lease gone: recorded, and changed nothing."""

    id: int
    outcome: AttemptOutcome


@dataclass(frozen=True, slots=True)
class CompletionFailed:
    """An attempt's result that could not be recorded (its lease will expire)."""

    id: int


@dataclass(frozen=True, slots=True)
class Released:
    """A row handed back at shutdown before anything was sent."""

    id: int


@dataclass(frozen=True, slots=True)
class Deferred:
    """A row handed back uncounted because its recipient's domain already had as many sends
    in flight as one domain may hold; due again after `delay` seconds."""

    id: int
    delay: float


@dataclass(frozen=True, slots=True)
class LeaseLost:
    id: int
    body_sent: bool


@dataclass(frozen=True, slots=True)
class ConfigurationProblem:
    """A delivery refused for our side's reasons (sender refused, policy, content)."""

    id: int
    code: int | None


@dataclass(frozen=True, slots=True)
class SendRateChanged:
    """The fleet's send rate in force, as this worker last read it (messages a second):
    less than NOTIFIER_SEND_RATE after the provider throttled, growing back since."""

    rate: float
    configured: float


@dataclass(frozen=True, slots=True)
class SendPaused:
    """The provider's daily quota is spent: no worker sends until `until` (UTC midnight);
    None: the pause is over."""

    until: datetime | None


@dataclass(frozen=True, slots=True)
class UnknownTokenKey:
    """A link made with a secret this worker lacks (retried until it expires)."""

    id: int
    key_id: str


# -- the LISTEN connection --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListenerConnected:
    pid: int
    server: str


@dataclass(frozen=True, slots=True)
class ListenerConnectFailed:
    error: str


@dataclass(frozen=True, slots=True)
class ListenerLost:
    reason: str
    # Whether it had heard anything (a listener behind a transaction pooler hears nothing).
    heard: bool


@dataclass(frozen=True, slots=True)
class ListenerChecked:
    """A self-notification round trip came back."""


@dataclass(frozen=True, slots=True)
class ListenerCheckSkipped:
    error: str


@dataclass(frozen=True, slots=True)
class MalformedPayload:
    pid: int


# -- webhooks ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WebhookAttempted:
    """One webhook request ended; `status` is its delivery's now (None: its lease was gone)."""

    owner: str
    id: int
    endpoint_id: uuid.UUID
    outcome: WebhookOutcome
    status: WebhookStatus | None
    seconds: float
    attempt: int


@dataclass(frozen=True, slots=True)
class WebhookEndpointDisabled:
    endpoint_id: uuid.UUID
    reason: str


WorkerEvent = (
    WorkerStarted
    | WorkerStopped
    | Claimed
    | Swept
    | Settled
    | ClaimFailed
    | Completed
    | StaleCompletion
    | CompletionFailed
    | Released
    | Deferred
    | LeaseLost
    | ConfigurationProblem
    | SendRateChanged
    | SendPaused
    | UnknownTokenKey
    | ListenerConnected
    | ListenerConnectFailed
    | ListenerLost
    | ListenerChecked
    | ListenerCheckSkipped
    | MalformedPayload
    | WebhookAttempted
    | WebhookEndpointDisabled
)


class Observer(Protocol):
    """Something told of each event as it happens. `notice` is synchronous and must be
    cheap: it runs inside the worker's event loop, asyncpg's notification callbacks too."""

    def notice(self, event: WorkerEvent) -> None: ...


class Events:
    """Tells every observer of each event, at once, and keeps nothing."""

    def __init__(self, *observers: Observer) -> None:
        self._observers = list(observers)

    def notice(self, event: WorkerEvent) -> None:
        for observer in self._observers:
            observer.notice(event)
