"""Verification requests sent through the real API at a steady pace, every answer recorded;
and the API and workers as real processes, started together."""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

import anyio
import httpx

from notifier.storage import api_keys
from notifier.storage.database import ONE_SHOT_CACHE, connect
from tests.conftest import TEST_SECRET
from tests.support.cli import RunningCli, running_cli
from tests.support.ports import free_port
from tests.support.smtp_server import SmtpServer

# One request may take this long before it counts as unanswered, seconds.
REQUEST_TIMEOUT_SECONDS = 15.0
# Requests in flight at once, so a slow answer does not hold up the pace.
MAX_IN_FLIGHT = 16
# Seconds a process may take to say it is ready, or to exit after SIGTERM.
PROCESS_WAIT_SECONDS = 30.0
API_READY = "public pages listening"  # logged once both listeners listen
WORKER_READY = "delivering ("
# How often wait_until looks again, seconds.
POLL_SECONDS = 0.1


def api_headers(idempotency_key: str, key: str) -> dict[str, str]:
    """The headers of every request these tests send to the API."""
    return {"Idempotency-Key": idempotency_key, "Authorization": f"Bearer {key}"}


async def client_key(database_url: str) -> str:
    """A new API key of scope "request" for the traffic, on the database behind the URL."""
    conn = await connect(database_url, statement_cache_size=ONE_SHOT_CACHE)
    try:
        return (await api_keys.create(conn, f"traffic-{uuid.uuid4().hex[:6]}", ["request"])).key
    finally:
        await conn.close()


@dataclass(frozen=True, slots=True)
class Answer:
    """What one request got: an HTTP status (None when no answer came) and when (time.time())."""

    index: int
    sent_at: float
    answered_at: float
    status: int | None
    verification_id: uuid.UUID | None = None
    retry_after: str | None = None
    error: str | None = None


class Traffic:
    """Requests verification i at i/rate seconds after run() starts, until stopped.

    Each request has its own user, address and Idempotency-Key, and is sent once: what the
    API answered is the record.
    """

    def __init__(self, base_url: str, key: str, rate: float, prefix: str) -> None:
        self.base_url = base_url
        self.key = key
        self.rate = rate
        self.prefix = prefix
        self.answers: list[Answer] = []
        self._stop = anyio.Event()

    def stop(self) -> None:
        self._stop.set()

    @property
    def accepted(self) -> dict[uuid.UUID, Answer]:
        return {a.verification_id: a for a in self.answers if a.verification_id is not None}

    def accepted_since(self, moment: float) -> int:
        """Requests sent at or after `moment` (time.time()) that were accepted."""
        return sum(1 for a in self.answers if a.status == 202 and a.sent_at >= moment)

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=MAX_IN_FLIGHT)
        in_flight = anyio.Semaphore(MAX_IN_FLIGHT)
        began = time.monotonic()
        async with (
            httpx.AsyncClient(
                base_url=self.base_url, timeout=REQUEST_TIMEOUT_SECONDS, limits=limits
            ) as client,
            anyio.create_task_group() as tg,
        ):
            index = 0
            while not self._stop.is_set():
                with anyio.move_on_after(max(0.0, began + index / self.rate - time.monotonic())):
                    await self._stop.wait()
                if self._stop.is_set():
                    break
                await in_flight.acquire()
                tg.start_soon(self._request, client, index, in_flight)
                index += 1

    async def _request(self, client: httpx.AsyncClient, index: int, done: anyio.Semaphore) -> None:
        key = f"{self.prefix}-{index}"
        body = {"user_id": key, "email": f"t{index}.{self.prefix}@example.com"}
        sent_at = time.time()
        try:
            response = await client.post(
                "/v1/verifications", json=body, headers=api_headers(key, self.key)
            )
        except httpx.TransportError as exc:
            self.answers.append(Answer(index, sent_at, time.time(), None, error=repr(exc)))
            return
        finally:
            done.release()
        verification_id = uuid.UUID(response.json()["id"]) if response.status_code == 202 else None
        self.answers.append(
            Answer(
                index,
                sent_at,
                time.time(),
                response.status_code,
                verification_id,
                response.headers.get("Retry-After"),
                None if response.status_code == 202 else response.text[:300],
            )
        )


@dataclass(slots=True)
class Service:
    """The API and the workers, running."""

    api: RunningCli
    workers: list[RunningCli]

    async def stop(self) -> list[int]:
        """SIGTERM everything; their exit codes (API first)."""
        processes = [self.api, *self.workers]
        for cli in processes:
            cli.process.send_signal(signal.SIGTERM)
        codes = []
        with anyio.fail_after(PROCESS_WAIT_SECONDS):
            for cli in processes:
                codes.append(await cli.process.wait())
        return codes


@contextlib.asynccontextmanager
async def running_service(
    api_env: Mapping[str, str], worker_envs: list[Mapping[str, str]]
) -> AsyncIterator[Service]:
    """`notifier api` and one `notifier worker` per environment, ready; killed on exit if
    still running."""
    async with contextlib.AsyncExitStack() as stack:
        api = await stack.enter_async_context(running_cli("api", env=api_env))
        workers = [
            await stack.enter_async_context(running_cli("worker", env=env)) for env in worker_envs
        ]
        with anyio.fail_after(PROCESS_WAIT_SECONDS):
            await api.wait_for_line(API_READY)
            for worker in workers:
                await worker.wait_for_line(WORKER_READY)
        yield Service(api, workers)


def service_env(database_url: str, smtp: SmtpServer, api_port: int, **extra: str) -> dict[str, str]:
    """Settings for the API and workers: quick retries, throttling out of the way."""
    return {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_TOKEN_SECRET": TEST_SECRET,
        "NOTIFIER_API_PORT": str(api_port),
        "NOTIFIER_PUBLIC_PORT": str(free_port()),
        "NOTIFIER_RESEND_LIMIT": "1000000",
        "NOTIFIER_DOMAIN_LIMIT": "0",
        "NOTIFIER_SMTP_HOST": smtp.host,
        "NOTIFIER_SMTP_PORT": str(smtp.port),
        "NOTIFIER_SMTP_TLS": "none",
        "NOTIFIER_SMTP_DATA_TIMEOUT": "10",
        "NOTIFIER_MAIL_FROM": "noreply@notifier.test",
        "NOTIFIER_RETRY_BASE": "0.2",
        "NOTIFIER_RETRY_FACTOR": "2",
        "NOTIFIER_RETRY_CEILING": "1",
        "NOTIFIER_SHUTDOWN_GRACE": "5",
        **extra,
    }


async def wait_until(condition: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    """Poll other processes' state (a database, the mail server) until `condition` holds."""
    try:
        with anyio.fail_after(within):
            while True:
                if await condition():
                    return
                await anyio.sleep(POLL_SECONDS)
    except TimeoutError:
        raise AssertionError(f"not within {within:g}s: {what}") from None
