"""notifier: email-verification delivery over a PostgreSQL outbox, woken by LISTEN/NOTIFY."""

from notifier.return_urls import InvalidReturn, Returned
from notifier.return_urls import check_return as _check_return
from notifier.storage.codes import (
    InTransaction,
    UnknownVerification,
    confirm_code,
    confirm_code_sync,
)
from notifier.storage.outbox import request_verification, request_verification_sync
from notifier.tokens import TokenKeys
from notifier.verifications import (
    CodeCheck,
    IdempotencyConflict,
    InvalidRequest,
    NoCode,
    NotInTransaction,
    Policy,
    RequestError,
    Suppressed,
    Throttled,
    VerificationResult,
)
from notifier.version import __version__


def check_return(
    url: str, *, client_id: str | None = None, keys: TokenKeys | None = None
) -> Returned:
    """What the redirect notifier sent a person back to the app with says (the URL the
    app's handler was called at): which verification, and that it is verified (`outcome`
    verified, or already_verified). InvalidReturn unless its signature holds and it has not
    expired. `client_id`: the API key id that requested the verification (None: it was
    requested with request_verification); `keys`: default, NOTIFIER_TOKEN_SECRET's."""
    if keys is None:
        from notifier.config import TokenSettings

        keys = TokenKeys(TokenSettings.from_env().secrets)
    return _check_return(url, keys, client_id=client_id)


__all__ = [
    "CodeCheck",
    "IdempotencyConflict",
    "InTransaction",
    "InvalidRequest",
    "InvalidReturn",
    "NoCode",
    "NotInTransaction",
    "Policy",
    "RequestError",
    "Returned",
    "Suppressed",
    "Throttled",
    "UnknownVerification",
    "VerificationResult",
    "__version__",
    "check_return",
    "confirm_code",
    "confirm_code_sync",
    "request_verification",
    "request_verification_sync",
]
