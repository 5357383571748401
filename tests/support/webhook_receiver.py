"""A real HTTP server in the test, on loopback, that receives webhooks: it checks every
signature with the Standard Webhooks spec's own library (`standardwebhooks`), records what
came, and answers as planned (a status, Retry-After, a hang, a dropped connection).

HTTP/1.1 with keep-alive, parsed by hand (a request line, headers, a Content-Length body),
which is all a webhook sender sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import orjson
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

MAX_BODY = 1 << 20
WAIT_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class Answer:
    """How to answer one request: `status` (with `headers`), after `delay` seconds; or
    `hang` (never answer until the client goes), or `drop` (close with no answer)."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b"ok"
    delay: float = 0.0
    hang: bool = False
    drop: bool = False


@dataclass(slots=True)
class Received:
    webhook_id: str
    timestamp: str
    signature: str
    body: bytes
    headers: dict[str, str]
    # Which of the receiver's secrets verified it (by the spec's library).
    verified_by: list[str] = field(default_factory=list)
    # When it arrived (time.time()).
    at: float = field(default_factory=time.time)

    @property
    def json(self) -> dict[str, object]:
        return orjson.loads(self.body)  # type: ignore[no-any-return]


class Receiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.secrets: list[str] = []
        self.connections = 0
        self._plans: deque[Answer] = deque()
        self._arrived = anyio.Event()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def plan(self, *answers: Answer) -> None:
        """Answer the next requests so, in order (then 200 again)."""
        self._plans.extend(answers)

    async def wait_for(self, count: int) -> list[Received]:
        with anyio.fail_after(WAIT_SECONDS):
            while len(self.received) < count:
                self._arrived = anyio.Event()
                await self._arrived.wait()
        return self.received

    def verified(self, secret: str) -> list[Received]:
        return [r for r in self.received if secret in r.verified_by]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                headers, body = request
                self._record(headers, body)
                answer = self._plans.popleft() if self._plans else Answer()
                if answer.drop:
                    return
                if answer.hang:
                    await reader.read()  # until the client gives up and closes
                    return
                if answer.delay:
                    await asyncio.sleep(answer.delay)
                writer.write(_response(answer))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _record(self, headers: dict[str, str], body: bytes) -> None:
        received = Received(
            headers.get("webhook-id", ""),
            headers.get("webhook-timestamp", ""),
            headers.get("webhook-signature", ""),
            body,
            headers,
        )
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers)
            except WebhookVerificationError:
                continue
            received.verified_by.append(secret)
        self.received.append(received)
        self._arrived.set()


async def _read_request(reader: asyncio.StreamReader) -> tuple[dict[str, str], bytes] | None:
    line = await reader.readline()
    if not line:
        return None
    headers: dict[str, str] = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = min(int(headers.get("content-length", "0")), MAX_BODY)
    return headers, await reader.readexactly(length)


def _response(answer: Answer) -> bytes:
    lines = [f"HTTP/1.1 {answer.status} Answer", f"Content-Length: {len(answer.body)}"]
    lines += [f"{name}: {value}" for name, value in answer.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + answer.body


@contextlib.asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    server = await asyncio.start_server(receiver._handle, "127.0.0.1", 0)
    receiver.port = server.sockets[0].getsockname()[1]
    try:
        yield receiver
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()
