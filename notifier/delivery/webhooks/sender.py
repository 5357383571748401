"""One webhook request: POST the signed body to the endpoint, over a connection to an
address checked just before (notifier.webhook_targets), and say what the answer means.

Plain HTTP/1.1 through httpcore, whose network backend is wrapped so that every connection
first resolves its host, refuses it if any address is forbidden, and connects to the
address it checked: no proxy from the environment, no redirect followed, nothing read of the
answer beyond its first bytes. The whole request, connecting to the last byte read, is bound
by NOTIFIER_WEBHOOK_TIMEOUT.
"""

from __future__ import annotations

import email.utils
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import httpcore

from notifier.redact import printable
from notifier.version import __version__
from notifier.webhook_outcomes import AttemptOutcome, outcome_of
from notifier.webhook_targets import IPAddress, Target, TargetRefused, check_url, resolve

# What is kept of a receiver's answer, and of an error's words.
DETAIL_CHARS = 300
_READ_BYTES = 512
USER_AGENT = f"notifier-webhooks/{__version__}"


@dataclass(frozen=True, slots=True)
class Answer:
    """How one request ended."""

    outcome: AttemptOutcome
    status_code: int | None
    detail: str | None
    seconds: float
    retry_after: float | None = None


class _CheckedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses webhook_targets allows, resolved here, once."""

    def __init__(self, allow_private: bool) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._allow_private = allow_private

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses: list[IPAddress] = await resolve(Target("", host, port), self._allow_private)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise TargetRefused("webhooks go over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class Sender:
    """POSTs webhooks; one connection pool for every endpoint, closed by `aclose`."""

    def __init__(
        self, timeout: float, allow_private: bool, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.timeout = timeout
        self._allow_private = allow_private
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=256,
            keepalive_expiry=30.0,
            network_backend=_CheckedBackend(allow_private),
        )

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> Answer:
        started = time.monotonic()
        sent = False
        try:
            # Checked again as it is sent: an http:// endpoint registered while private
            # targets were allowed gets nothing in cleartext once they are not.
            check_url(url, self._allow_private)
        except TargetRefused as exc:
            return Answer("refused", None, _cut(str(exc)), 0.0)

        async def trace(name: str, info: Mapping[str, Any]) -> None:
            nonlocal sent
            # Once the request's headers start out, the receiver may act on it.
            if name.endswith("send_request_headers.started"):
                sent = True

        request_headers = {
            **headers,
            "content-type": "application/json",
            "user-agent": USER_AGENT,
        }
        timeouts = {"connect": self.timeout, "read": self.timeout, "write": self.timeout}
        try:
            with anyio.fail_after(self.timeout):
                async with self._pool.stream(
                    "POST",
                    url,
                    headers=list(request_headers.items()),
                    content=body,
                    extensions={"timeout": timeouts, "trace": trace},
                ) as response:
                    excerpt = await _first_bytes(response)
        except TargetRefused as exc:
            return Answer("refused", None, _cut(str(exc)), time.monotonic() - started)
        except TimeoutError:
            outcome: AttemptOutcome = "unknown" if sent else "failed"
            detail = f"no answer within {self.timeout:g}s"
            return Answer(outcome, None, detail, time.monotonic() - started)
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            detail = _cut(f"cannot connect: {exc or type(exc).__name__}")
            return Answer("failed", None, detail, time.monotonic() - started)
        except (httpcore.NetworkError, httpcore.TimeoutException, httpcore.ProtocolError) as exc:
            detail = _cut(f"{type(exc).__name__}: {exc}")
            return Answer("unknown" if sent else "failed", None, detail, time.monotonic() - started)
        seconds = time.monotonic() - started
        status = response.status
        outcome = outcome_of(status)
        said = None if outcome == "delivered" else _cut(f"HTTP {status}: {excerpt}".rstrip(": "))
        retry_after = _retry_after(response.headers) if outcome == "throttled" else None
        return Answer(outcome, status, said, seconds, retry_after)

    async def aclose(self) -> None:
        await self._pool.aclose()


async def _first_bytes(response: httpcore.Response) -> str:
    read = b""
    async for chunk in response.aiter_stream():
        read += chunk
        if len(read) >= _READ_BYTES:
            break
    return read[:_READ_BYTES].decode("utf-8", errors="replace")


def _cut(text: str) -> str:
    return printable(text)[:DETAIL_CHARS]


def _retry_after(headers: list[tuple[bytes, bytes]]) -> float | None:
    """Retry-After as seconds from now: a number of seconds, or an HTTP date."""
    for name, value in headers:
        if name.lower() != b"retry-after":
            continue
        text = value.decode("latin-1").strip()
        if text.isascii() and text.isdigit():  # "²".isdigit() is true, float("²") fails
            return float(text)
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max((when - datetime.now(UTC)).total_seconds(), 0.0)
    return None
