"""notifier: email-verification delivery over a PostgreSQL outbox, woken by LISTEN/NOTIFY."""

# Before the imports below: modules they load read it.
__version__ = "0.1.0"

from notifier.verifications import (
    IdempotencyConflict,
    InvalidRequest,
    Policy,
    RequestError,
    Suppressed,
    Throttled,
    VerificationResult,
    request_verification,
)

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
