"""Suppressed addresses, as operators and support staff list and clear them.

Workers write suppressions when they settle a delivery (complete_attempts); requests read
them (request_v3). This module is the one place that lists and clears them, for the CLI
and the internal API alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from notifier import addresses
from notifier.storage.connection import Runner
from notifier.storage.queries import sql
from notifier.verifications import InvalidRequest


@dataclass(frozen=True, slots=True)
class Suppression:
    """One suppressed address (lowercased, as it was refused): why, since when, until when
    (None: until cleared)."""

    address: str
    reason: str
    smtp_code: int | None
    suppressed_at: datetime
    expires_at: datetime | None


async def active(conn: Runner) -> list[Suppression]:
    """Every address suppressed now, newest first."""
    return [
        Suppression(r["email"], r["reason"], r["smtp_code"], r["suppressed_at"], r["expires_at"])
        for r in await conn.fetch(sql("suppressions"))
    ]


async def clear(conn: Runner, address: str, separators: str) -> str | None:
    """Clear the suppression of `address` (whatever its case); the address as it was
    suppressed, or None if it was not. InvalidRequest for something that is not an address."""
    try:
        key = addresses.parse(address, separators).folded
    except addresses.InvalidAddress as exc:
        raise InvalidRequest("email", str(exc)) from exc
    cleared: str | None = await conn.fetchval(sql("clear_suppression"), key)
    return cleared
