"""Producing work: verifications requested at a steady rate, or a backlog inserted at once.

The steady producer runs the product's own request statement (one transaction per
request, the outbox insert firing the NOTIFY trigger) and notes the wall clock the moment
COMMIT has returned: the start of every latency this run reports.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from notifier import tokens
from notifier.config import RequestSettings
from notifier.storage.outbox import request_standalone
from notifier.tokens import TokenKeys
from notifier.verifications import Policy

# The workers derive each link's token from this (NOTIFIER_TOKEN_SECRET).
TOKEN_SECRET = secrets.token_urlsafe(32)
MESSAGE_ID_DOMAIN = "bench.example.com"
MAIL_FROM = f"notifier@{MESSAGE_ID_DOMAIN}"
# Recipients are unique per request, so supersession and throttling never interfere.
RECIPIENT_DOMAIN = "example.com"
# A producer that falls this far behind its schedule stops rather than bursting to catch up.
MAX_BEHIND_SECONDS = 1.0


# Limits so high no benchmark request meets them, yet every budget is still counted, so a
# request costs what it costs in production.
UNREACHABLE_LIMITS = RequestSettings(
    resend_limit=1_000_000, domain_limit=10**9, client_limit=10**9, global_limit=10**9
)


def policy() -> Policy:
    """Request rules that never refuse a benchmark request."""
    return Policy(
        keys=TokenKeys((TOKEN_SECRET,)),
        ttl_seconds=3600.0,
        message_id_domain=MESSAGE_ID_DOMAIN,
        limits=UNREACHABLE_LIMITS,
    )


@dataclass(slots=True)
class Produced:
    """What a steady producer committed: each verification and when its COMMIT returned."""

    commits: dict[uuid.UUID, int] = field(default_factory=dict)  # id -> time.time_ns()
    started_ns: int = 0
    ended_ns: int = 0
    # How late each request started against its schedule, milliseconds.
    lateness_ms: list[float] = field(default_factory=list)
    stopped_behind: bool = False


async def produce_steady(
    conn: Any,
    *,
    rate: float | None,
    seconds: float,
    tag: str,
    produced: Produced | None = None,
    phase: float = 0.0,
    max_behind: float | None = MAX_BEHIND_SECONDS,
) -> Produced:
    """Request `rate` verifications per second for `seconds` (None: back to back), each its
    own transaction, through the product's request statement (as the API sends it)."""
    produced = produced or Produced()
    rules = policy()

    async def request(i: int) -> None:
        result = await request_standalone(
            conn,
            user_id=f"{tag}-{i}",
            email=f"{tag}-{i}@{RECIPIENT_DOMAIN}",
            policy=rules,
        )
        produced.commits[result.id] = time.time_ns()

    await paced(
        request, rate=rate, seconds=seconds, produced=produced, phase=phase, max_behind=max_behind
    )
    return produced


async def paced(
    request: Callable[[int], Awaitable[None]],
    *,
    rate: float | None,
    seconds: float,
    produced: Produced,
    phase: float = 0.0,
    max_behind: float | None = MAX_BEHIND_SECONDS,
) -> None:
    """Call `request(i)` on an open-loop schedule: the i-th call is due `phase + i / rate`
    seconds after the start, whatever the earlier calls took. With `rate` None, calls go back
    to back until `seconds` have passed.

    A caller that falls more than `max_behind` seconds behind stops rather than bursting to
    catch up; with `max_behind` None it keeps going, back to back, until its window ends.
    Either way `produced.stopped_behind` tells that the schedule was not kept.
    """
    produced.started_ns = time.time_ns()
    start = time.perf_counter()
    deadline = start + seconds
    if rate is None:
        i = 0
        while time.perf_counter() < deadline:
            await request(i)
            i += 1
        produced.ended_ns = time.time_ns()
        return
    interval = 1.0 / rate
    for i in range(round(rate * seconds)):
        due = start + phase + i * interval
        delay = due - time.perf_counter()
        if delay > 0:
            await anyio.sleep(delay)
        now = time.perf_counter()
        behind = now - due
        if (max_behind is not None and behind > max_behind) or (
            max_behind is None and now >= deadline + interval
        ):
            produced.stopped_behind = True
            break
        produced.lateness_ms.append(max(0.0, behind) * 1000)
        await request(i)
    produced.ended_ns = time.time_ns()


# A backlog in one statement, set-based: verifications with the real key id and a random
# 32-byte nonce each (the worker derives a token from them), and their outbox rows, whose
# insert fires the trigger once for the whole statement. $1: rows, $2: key id,
# $3: Message-ID domain, $4: user id prefix.
INSERT_BACKLOG = """
WITH generated AS (
    SELECT gen_random_uuid() AS id, g
    FROM generate_series(1, $1::integer) AS g
), verifications AS (
    INSERT INTO notifier.verifications
        (id, user_id, email, purpose, token_key_id, token_nonce, token_hash, expires_at)
    SELECT id, $4 || '-' || g, $4 || '-' || g || '@example.com', 'signup', $2,
           sha256(convert_to(gen_random_uuid()::text, 'UTF8')),
           sha256(convert_to(id::text, 'UTF8')),
           now() + interval '1 hour'
    FROM generated
    RETURNING id
)
INSERT INTO notifier.email_outbox (verification_id, message_id, max_attempts)
SELECT id, '<verify.' || id || '@' || $3 || '>', 5 FROM verifications
"""


async def insert_backlog(conn: Any, rows: int, tag: str) -> int:
    """Insert `rows` due deliveries in one statement; returns time.time_ns() after COMMIT."""
    await conn.execute(INSERT_BACKLOG, rows, tokens.key_id(TOKEN_SECRET), MESSAGE_ID_DOMAIN, tag)
    return time.time_ns()


# Verifications alone, no outbox rows: events (verification.created) with no email to send,
# so what drains them is the webhook sender alone. $1: rows, $2: key id, $3: user id prefix.
INSERT_VERIFICATIONS = """
INSERT INTO notifier.verifications
    (id, user_id, email, purpose, token_key_id, token_nonce, token_hash, expires_at)
SELECT gen_random_uuid(), $3 || '-' || g, $3 || '-' || g || '@example.com', 'signup', $2,
       sha256(convert_to(gen_random_uuid()::text, 'UTF8')),
       sha256(convert_to(gen_random_uuid()::text, 'UTF8')),
       now() + interval '1 hour'
FROM generate_series(1, $1::integer) AS g
"""


async def insert_verifications(conn: Any, rows: int, tag: str) -> None:
    """Insert `rows` verifications without outbox rows, in one statement."""
    await conn.execute(INSERT_VERIFICATIONS, rows, tokens.key_id(TOKEN_SECRET), tag)
