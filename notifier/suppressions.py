"""Suppressed mailboxes, as operators and support staff list and clear them.

Workers write suppressions when they settle a delivery (complete_attempts); requests read
them (request_v1). This module is the one place that lists and clears them, for the CLI
and the internal API alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from notifier.queries import sql
from notifier.verifications import normalize_email


@dataclass(frozen=True, slots=True)
class Suppression:
    """One suppressed mailbox: why, since when, until when (None: until cleared)."""

    mailbox: str
    reason: str
    smtp_code: int | None
    suppressed_at: datetime
    expires_at: datetime | None


async def active(conn: Any) -> list[Suppression]:
    """Every mailbox suppressed now, newest first."""
    return [
        Suppression(r["email"], r["reason"], r["smtp_code"], r["suppressed_at"], r["expires_at"])
        for r in await conn.fetch(sql("suppressions"))
    ]


async def clear(conn: Any, address: str, separators: str) -> str | None:
    """Clear the mailbox `address` is a spelling of; its canonical form, or None if it was
    not suppressed. InvalidRequest for something that is not an address."""
    mailbox = normalize_email(address, separators)
    cleared: str | None = await conn.fetchval(sql("clear_suppression"), mailbox)
    return cleared
