"""notifier: email-verification delivery over a PostgreSQL outbox, woken by LISTEN/NOTIFY."""

from notifier.storage.outbox import request_verification, request_verification_sync
from notifier.verifications import (
    IdempotencyConflict,
    InvalidRequest,
    NotInTransaction,
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
    "NotInTransaction",
    "Policy",
    "RequestError",
    "Suppressed",
    "Throttled",
    "VerificationResult",
    "__version__",
    "request_verification",
    "request_verification_sync",
]
