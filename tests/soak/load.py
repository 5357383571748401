"""The load: N verifications requested through the real API, at a steady pace.

Each request has its own user, address and Idempotency-Key. A request that meets a refused
connection, a timeout, a 5xx or a 503 is sent again with the same key, which the API makes
safe: the retry returns the first result if the first attempt committed.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import anyio
import httpx

from tests.soak.settings import RECIPIENT_DOMAIN

# One HTTP exchange may take this long before it is retried, seconds.
REQUEST_TIMEOUT_SECONDS = 10.0
# Retry delays grow from the first to the cap, seconds.
RETRY_FIRST_SECONDS = 0.1
RETRY_CAP_SECONDS = 2.0
# Tries one request gets before it is given up (the phase deadline usually ends it first).
MAX_TRIES = 500


@dataclass(slots=True)
class Request:
    """One verification the soak asks for, and what became of the asking."""

    index: int
    user_id: str
    email: str
    key: str
    tries: int = 0
    verification_id: uuid.UUID | None = None
    replayed: bool = False
    refused: str | None = None  # a final answer other than 202


@dataclass(slots=True)
class LoadStats:
    """What the API client saw."""

    requests: list[Request]
    retries_by_cause: Counter[str] = field(default_factory=Counter)
    started_at: float = 0.0
    finished_at: float | None = None

    @property
    def accepted(self) -> int:
        return sum(1 for r in self.requests if r.verification_id is not None)

    @property
    def replays(self) -> int:
        return sum(1 for r in self.requests if r.replayed)


def plan_requests(count: int, run_id: str) -> list[Request]:
    return [
        Request(
            index=i,
            user_id=f"soak-{run_id}-{i}",
            email=f"u{i}.{run_id}@{RECIPIENT_DOMAIN}",
            key=f"soak-{run_id}-{i}",
        )
        for i in range(count)
    ]


async def run_load(
    api_url: str,
    api_key: str,
    stats: LoadStats,
    rate: float,
    concurrency: int,
    deadline: float,
    progress: anyio.Event | None = None,
    progress_at: int | None = None,
) -> None:
    """Send every request, request i no earlier than i/rate seconds in; return when each
    was accepted or refused, or at `deadline` (monotonic). `progress` is set once
    `progress_at` requests have been accepted."""
    stats.started_at = time.time()
    start = time.monotonic()
    queue = list(reversed(stats.requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=api_url,
        timeout=REQUEST_TIMEOUT_SECONDS,
        limits=limits,
        headers={"Authorization": f"Bearer {api_key}"},
    ) as client:

        async def sender() -> None:
            while queue:
                request = queue.pop()
                due = start + request.index / rate
                await anyio.sleep(max(0.0, due - time.monotonic()))
                await _submit(client, request, stats, deadline)
                if (
                    progress is not None
                    and progress_at is not None
                    and not progress.is_set()
                    and stats.accepted >= progress_at
                ):
                    progress.set()

        with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
            async with anyio.create_task_group() as tg:
                for _ in range(concurrency):
                    tg.start_soon(sender)
    stats.finished_at = time.time()


async def _submit(
    client: httpx.AsyncClient, request: Request, stats: LoadStats, deadline: float
) -> None:
    body = {"user_id": request.user_id, "email": request.email}
    headers = {"Idempotency-Key": request.key}
    delay = RETRY_FIRST_SECONDS
    while request.tries < MAX_TRIES and time.monotonic() < deadline:
        request.tries += 1
        cause: str
        try:
            response = await client.post("/v1/verifications", json=body, headers=headers)
        except httpx.TransportError as exc:
            cause = type(exc).__name__
        else:
            if response.status_code == 202:
                request.verification_id = uuid.UUID(response.json()["id"])
                request.replayed = response.headers.get("Idempotent-Replayed") == "true"
                return
            if response.status_code < 500:
                request.refused = f"{response.status_code} {response.text[:200]}"
                return
            cause = f"HTTP {response.status_code}"
        stats.retries_by_cause[cause] += 1
        await anyio.sleep(delay)
        delay = min(RETRY_CAP_SECONDS, delay * 2)
