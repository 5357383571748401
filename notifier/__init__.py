"""notifier: email-verification delivery over a PostgreSQL outbox, woken by LISTEN/NOTIFY."""

from notifier.storage.outbox import request_verification
from notifier.verifications import (
    IdempotencyConflict,
    InvalidRequest,
    Policy,
    RequestError,
    Suppressed,
    Throttled,
    VerificationResult,
)
from notifier.version import __version__

__all__ = [
    "IdempotencyConflict",
    "InvalidRequest",
    "Policy",
    "RequestError",
    "Suppressed",
    "Throttled",
    "VerificationResult",
    "__version__",
    "request_verification",
]
