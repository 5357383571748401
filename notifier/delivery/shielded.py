"""A write that must land: shielded from shutdown, bounded, and retried.

A completion or release that cannot reach the database is retried after
COMPLETION_RETRY_DELAYS; if every try fails, the lease expires and the row is retried by
whoever claims it next (the email worker's deliveries and the webhook sender's alike).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")

COMPLETION_RETRY_DELAYS = (0.1, 0.5, 1.0, 2.0, 4.0)
# Upper bound on one release or completion statement (also during shutdown), seconds.
CLEANUP_TIMEOUT_SECONDS = 10.0


async def persisted(statement: Callable[[], Awaitable[T]]) -> T | Exception:
    """What `statement` answered, or the last error once every try failed.

    Each try is shielded, so shutdown cannot drop it, and bounded by
    CLEANUP_TIMEOUT_SECONDS in the same scope (cheaper than a shielded scope around
    fail_after, and this runs once per delivery); tries follow COMPLETION_RETRY_DELAYS.
    """
    error: Exception | None = None
    for delay in (*COMPLETION_RETRY_DELAYS, None):
        deadline = anyio.current_time() + CLEANUP_TIMEOUT_SECONDS
        error = None
        with anyio.CancelScope(shield=True, deadline=deadline) as attempt:
            try:
                return await statement()
            except Exception as exc:
                error = exc
        if error is None and attempt.cancelled_caught:
            error = TimeoutError(f"no answer within {CLEANUP_TIMEOUT_SECONDS:.0f}s")
        if delay is None:
            break
        with anyio.CancelScope(shield=True):
            await anyio.sleep(delay)
    assert error is not None
    return error
