"""The webhook endpoints' store: registering (after the URL and every address it resolves to
pass notifier.webhook_targets), listing with their health, removing, rotating and enabling
them, replaying a dead delivery, and what the console shows of deliveries and attempts.

What the CLI and the internal API's /v1/webhooks do; a secret is shown once, when an endpoint
is registered or rotated, and never stored (notifier.webhook_signing derives it).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio

from notifier.errors import NotifierError
from notifier.event_types import check_types
from notifier.storage.connection import Runner
from notifier.storage.queries import sql
from notifier.tokens import TokenKeys
from notifier.webhook_signing import SecretRef, secret_of, shown
from notifier.webhook_targets import TargetRefused, check_url, resolve

MAX_DESCRIPTION = 200
RESOLVE_SECONDS = 10.0


class WebhookError(NotifierError):
    """A webhook endpoint that cannot be registered or changed as asked; nothing changed."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: uuid.UUID
    url: str
    event_types: tuple[str, ...] | None  # None: every type
    description: str | None
    created_at: datetime
    failing_since: datetime | None
    last_success_at: datetime | None
    last_failure_at: datetime | None
    disabled_at: datetime | None
    disabled_reason: str | None
    # The token secret its signing secret is derived from, and whether a previous one still
    # signs beside it (until when).
    secret_key_id: str
    previous_until: datetime | None
    pending: int
    dead: int

    @classmethod
    def of(cls, row: Any) -> Endpoint:
        types = row["event_types"]
        return cls(
            row["id"],
            row["url"],
            None if types is None else tuple(types),
            row["description"],
            row["created_at"],
            row["failing_since"],
            row["last_success_at"],
            row["last_failure_at"],
            row["disabled_at"],
            row["disabled_reason"],
            row["secret_key_id"],
            row["previous_until"] if row["previous_key_id"] is not None else None,
            row["pending"],
            row["dead"],
        )


async def add(
    conn: Runner,
    keys: TokenKeys,
    url: str,
    event_types: Sequence[str] | None = None,
    description: str | None = None,
    *,
    allow_private: bool = False,
) -> tuple[Endpoint, str]:
    """Register `url` for `event_types` (None: every type); the endpoint and its secret,
    shown this once. WebhookError for a URL webhooks may not go to (checked before anything
    is written, by resolving it), an unknown type or an over-long description."""
    try:
        with anyio.fail_after(RESOLVE_SECONDS):
            await resolve(check_url(url, allow_private), allow_private)
        types = None if event_types is None else check_types(list(event_types))
    except (TargetRefused, ValueError) as exc:
        raise WebhookError(str(exc)) from None
    except TimeoutError:
        raise WebhookError(f"the URL's host did not resolve within {RESOLVE_SECONDS:g}s") from None
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise WebhookError(f"the description is longer than {MAX_DESCRIPTION} characters")
    ref = SecretRef.new(keys)
    row = await conn.fetchrow(sql("webhook_endpoint_insert"), url, types, description,
                              ref.key_id, ref.nonce)  # fmt: skip
    endpoint = Endpoint.of(row)
    return endpoint, shown(secret_of(keys, endpoint.id, ref))


async def listing(conn: Runner) -> list[Endpoint]:
    return [Endpoint.of(r) for r in await conn.fetch(sql("webhook_endpoints"))]


async def remove(conn: Runner, endpoint_id: uuid.UUID) -> None:
    if await conn.fetchval(sql("webhook_endpoint_delete"), endpoint_id) is None:
        raise WebhookError(f"no webhook endpoint has the id {endpoint_id}")


async def rotate(
    conn: Runner, keys: TokenKeys, endpoint_id: uuid.UUID, overlap: float
) -> tuple[str, datetime]:
    """A new secret for the endpoint (shown this once); the old one signs beside it for
    `overlap` seconds (until the returned time), so receivers can switch without a gap."""
    ref = SecretRef.new(keys)
    row = await conn.fetchrow(
        sql("webhook_endpoint_rotate"), endpoint_id, ref.key_id, ref.nonce, overlap
    )
    if row is None:
        raise WebhookError(f"no webhook endpoint has the id {endpoint_id}")
    return shown(secret_of(keys, endpoint_id, ref)), row["previous_until"]


async def enable(conn: Runner, endpoint_id: uuid.UUID) -> None:
    """Enable a disabled endpoint again; its waiting deliveries go out at once."""
    if await conn.fetchrow(sql("webhook_endpoint_enable"), endpoint_id) is None:
        raise WebhookError(f"no webhook endpoint has the id {endpoint_id}")


async def replay(conn: Runner, delivery_id: int) -> bool:
    """Send a dead delivery again, with a fresh schedule; False: no such dead delivery."""
    return await conn.fetchrow(sql("webhook_delivery_replay"), delivery_id) is not None


async def deliveries_of_endpoint(conn: Runner, endpoint_id: uuid.UUID, limit: int) -> list[Any]:
    return list(await conn.fetch(sql("webhook_deliveries_of_endpoint"), endpoint_id, limit))


async def deliveries_of_verification(conn: Runner, verification_id: uuid.UUID) -> list[Any]:
    return list(await conn.fetch(sql("webhook_deliveries_of_verification"), verification_id))


async def attempts_of(conn: Runner, delivery_ids: Sequence[int]) -> dict[int, list[Any]]:
    """Each delivery's attempts, oldest first."""
    found: dict[int, list[Any]] = {i: [] for i in delivery_ids}
    for row in await conn.fetch(sql("webhook_attempts_of"), list(delivery_ids)):
        found[row["delivery_id"]].append(row)
    return found
