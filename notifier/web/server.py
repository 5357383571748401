"""The HTTP server both listeners run on: uvicorn, bounded against slow clients."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from notifier.config import ApiSettings
from notifier.errors import ConfigError


class QuietServer(uvicorn.Server):
    """uvicorn without signal handlers of its own: notifier's signal watcher stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop(self) -> None:
        self.should_exit = True


@dataclass(frozen=True, slots=True)
class Listener:
    """One HTTP listener: its app, its bound socket and the server that will serve it."""

    name: str
    server: QuietServer
    sock: socket.socket

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}"


def http_server(app: Any, settings: ApiSettings) -> QuietServer:
    config = uvicorn.Config(
        app,
        log_config=None,
        # uvicorn's access log would print /verify?token=... : links must never reach logs.
        access_log=False,
        server_header=False,
        # Each app's routes own their state; the runner owns the pool and background tasks.
        lifespan="off",
        limit_concurrency=settings.limit_concurrency,
        timeout_keep_alive=settings.keepalive_timeout,
        http=_with_head_deadline(settings.header_timeout),
    )
    return QuietServer(config)


def _with_head_deadline(seconds: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, letting go of a connection whose request head does not
    arrive within `seconds`: from the moment it opens, and again after each response.

    uvicorn times out only an idle connection between requests, and forgets even that once
    the first byte of the next request arrives: a client that sends nothing, or half a head,
    would hold a connection (and its share of limit_concurrency) for good. (httptools, not
    h11: its C parser costs a request about 15% less CPU.)
    """

    class HeadDeadline(HttpToolsProtocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()  # the head is in: the body has its own bound (BodyGuard)
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            # A pipelined request waiting for this response has its head in already (the
            # response's completion starts it); otherwise the next head is awaited from now.
            pipelined = bool(self.pipeline)
            super().on_response_complete()
            if not pipelined and not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head_deadline = self.loop.call_later(seconds, self._overdue)

        def _disarm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _overdue(self) -> None:
            self._head_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeadDeadline


def listen(host: str, port: int, setting: str) -> socket.socket:
    """A listening socket, bound before serving so a taken port is a clear error."""
    try:
        sock = socket.create_server((host, port), backlog=2048)
    except OSError as exc:
        raise ConfigError(setting, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    # asyncio sets TCP_NODELAY only on sockets whose protocol number is IPPROTO_TCP, and
    # create_server's is 0: without it, the second segment of every response on a kept-alive
    # connection waits for the client's delayed ACK (about 40 ms). Accepted connections
    # inherit the option from the listening socket.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
