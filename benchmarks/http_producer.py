"""Producing work through the HTTP API: kept-alive connections posting verification requests.

An app backend keeps its connections to the API open, so each producer here holds one
HTTP/1.1 connection for its whole run (h11, the parser uvicorn itself uses, over an anyio
TCP stream: little client CPU, one write per request). A request's latency runs from just
before its bytes are written to when the whole 202 response has been read; that moment is
also the request's commit time for the delivery latencies (COMMIT returned before the API
answered, so deliveries look slightly faster from it than from the commit itself).

Every request's headers come from `request_headers`, and the API key from `api_key`.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import h11
import orjson

from benchmarks.producer import RECIPIENT_DOMAIN, Produced, paced
from benchmarks.stats import Distribution, distribution
from notifier.storage import api_keys
from notifier.storage.database import connect

HOST = "127.0.0.1"
REQUEST_PATH = "/v1/verifications"
# What the delayed-ACK probe asks for: an answer that costs the server next to nothing, so
# the probe times the connection, not the work (a busy machine cannot fake a stall).
PROBE_PATH = "/healthz"
RECEIVE_BYTES = 65536
# Sequential requests on one kept-alive connection in a delayed-ACK probe.
PROBE_REQUESTS = 100
# A kept-alive connection whose fastest tenth of requests take this long each is waiting on
# delayed ACKs: Linux delays an ACK about 40 ms, and then every request but the first waits
# for one, while a busy machine slows some requests but never the fastest tenth that much.
DELAYED_ACK_STALL_MS = 30.0
STALL_PERCENTILE = 10


# -- the API key hook -----------------------------------------------------------------------


async def api_key(admin_url: str) -> str | None:
    """The API key the producers present: a new key of scope "request" on the run's
    database, as an operator would make one for an app backend."""
    conn = await connect(admin_url)
    try:
        return (await api_keys.create(conn, f"benchmark-{uuid.uuid4().hex[:8]}", ["request"])).key
    finally:
        await conn.close()


def request_headers(
    port: int, key: str | None, idempotency_key: str | None = None
) -> list[tuple[str, str]]:
    """Every header a producer's request carries, but Content-Length (the body's framing)."""
    headers = [("Host", f"{HOST}:{port}"), ("Content-Type", "application/json")]
    if idempotency_key is not None:
        headers.append(("Idempotency-Key", idempotency_key))
    if key is not None:
        headers.append(("Authorization", f"Bearer {key}"))
    return headers


# -- one kept-alive connection --------------------------------------------------------------


class ApiError(RuntimeError):
    """The API closed the connection or answered something that is not HTTP."""


class KeptAlive:
    """One HTTP/1.1 connection to the API, reused for every request of one producer."""

    def __init__(self, stream: anyio.abc.SocketStream, port: int, key: str | None) -> None:
        self.stream = stream
        self.port = port
        self.key = key
        self.http = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, port: int, key: str | None) -> KeptAlive:
        # anyio sets TCP_NODELAY on the sockets it connects, so each request leaves at once.
        return cls(await anyio.connect_tcp(HOST, port), port, key)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def post(self, body: bytes, idempotency_key: str) -> tuple[int, bytes]:
        """POST `body` (JSON) to the request path; the status and the response body."""
        headers = request_headers(self.port, self.key, idempotency_key)
        return await self._exchange("POST", REQUEST_PATH, headers, body)

    async def get(self, target: str) -> tuple[int, bytes]:
        return await self._exchange("GET", target, request_headers(self.port, self.key), b"")

    async def _exchange(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, bytes]:
        """One request, written at once, and its whole response."""
        headers = [*headers, ("Content-Length", str(len(body)))]
        data = self.http.send(h11.Request(method=method, target=target, headers=headers)) or b""
        if body:
            data += self.http.send(h11.Data(data=body)) or b""
        data += self.http.send(h11.EndOfMessage()) or b""
        await self.stream.send(data)
        status = 0
        chunks: list[bytes] = []
        while True:
            event = self.http.next_event()
            if event is h11.NEED_DATA:
                try:
                    self.http.receive_data(await self.stream.receive(RECEIVE_BYTES))
                except anyio.EndOfStream:
                    self.http.receive_data(b"")
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise ApiError("the API closed a kept-alive connection")
        self.http.start_next_cycle()
        return status, b"".join(chunks)


# -- producing ------------------------------------------------------------------------------


@dataclass(slots=True)
class HttpProduced:
    """What one HTTP producer did: its accepted verifications (as `Produced`), how long each
    request took, and the answers that were not 202."""

    produced: Produced = field(default_factory=Produced)
    request_ms: list[float] = field(default_factory=list)
    refused: dict[int, int] = field(default_factory=dict)  # HTTP status -> count


async def _post(connection: KeptAlive, out: HttpProduced, user: str) -> None:
    """One verification request for `user` (also its idempotency key), noted in `out`."""
    body = orjson.dumps(
        {"user_id": user, "email": f"{user}@{RECIPIENT_DOMAIN}", "purpose": "signup"}
    )
    began = time.perf_counter_ns()
    status, answer = await connection.post(body, user)
    answered = time.time_ns()
    out.request_ms.append((time.perf_counter_ns() - began) / 1e6)
    if status != 202:
        out.refused[status] = out.refused.get(status, 0) + 1
        return
    out.produced.commits[uuid.UUID(orjson.loads(answer)["id"])] = answered


async def produce_http(
    connection: KeptAlive,
    *,
    rate: float | None,
    seconds: float,
    tag: str,
    phase: float = 0.0,
    max_behind: float | None = None,
) -> HttpProduced:
    """POST `rate` verification requests per second for `seconds` (None: back to back) on one
    kept-alive connection."""
    out = HttpProduced()

    async def request(i: int) -> None:
        await _post(connection, out, f"{tag}-{i}")

    await paced(
        request,
        rate=rate,
        seconds=seconds,
        produced=out.produced,
        phase=phase,
        max_behind=max_behind,
    )
    return out


# -- the delayed-ACK probe ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    """Sequential requests on one kept-alive connection, each sent when the last answered
    (`refused`: answers other than 200, by status)."""

    server: str
    requests: int
    request_ms: Distribution | None
    # The STALL_PERCENTILE-th percentile of the requests' times, ms.
    fastest_ms: float | None
    refused: dict[int, int]

    @property
    def stalled(self) -> bool | None:
        if self.fastest_ms is None:
            return None
        return self.fastest_ms >= DELAYED_ACK_STALL_MS

    def as_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "requests": self.requests,
            "request_ms": None if self.request_ms is None else dataclasses.asdict(self.request_ms),
            "p10_ms": self.fastest_ms,
            "refused": {str(k): v for k, v in self.refused.items()},
            "stalled": self.stalled,
        }


async def probe_delayed_acks(
    server: str, port: int, key: str | None, requests: int = PROBE_REQUESTS
) -> Probe:
    """`requests` GETs of PROBE_PATH back to back on one connection: without TCP_NODELAY on
    the server's end, the body of each answer waits about 40 ms for the client's delayed ACK
    of its headers."""
    connection = await KeptAlive.open(port, key)
    times: list[float] = []
    refused: dict[int, int] = {}
    try:
        for _ in range(requests):
            began = time.perf_counter_ns()
            status, _ = await connection.get(PROBE_PATH)
            times.append((time.perf_counter_ns() - began) / 1e6)
            if status != 200:
                refused[status] = refused.get(status, 0) + 1
    finally:
        await connection.aclose()
    times.sort()
    fastest = times[len(times) * STALL_PERCENTILE // 100] if times else None
    return Probe(server, requests, distribution(times), fastest, refused)
