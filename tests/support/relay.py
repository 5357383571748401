"""A TCP relay in front of PostgreSQL that can hold back the server's replies or cut off.

Holding the replies leaves a statement done and committed on the server while its client
still waits for the answer: the window a cancellation can fall into. Cutting off is the
database going away for a while: every connection closed, new ones refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import anyio.abc

DEFAULT_PORT = 5432


class Relay:
    """Relays 127.0.0.1:`port` to the server of `url`; `hold()` pauses its replies."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.port = 0
        self._flowing = anyio.Event()
        self._flowing.set()
        self._cut_off = False
        self._connections: set[anyio.CancelScope] = set()
        # Round trips: how often a client began to send after hearing the server (or first).
        self.client_turns = 0
        self._client_spoke_last = False

    def hold(self) -> None:
        """From now on, bytes from the server wait in the relay until `flow()`."""
        if self._flowing.is_set():
            self._flowing = anyio.Event()

    def flow(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        """Close every relayed connection and refuse new ones until `restore()`."""
        self._cut_off = True
        for connection in self._connections:
            connection.cancel()

    def restore(self) -> None:
        self._cut_off = False

    @property
    def relayed_url(self) -> str:
        """`url` with its host and port replaced by the relay's (credentials kept)."""
        parts = urlsplit(self.url)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port")]
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))

    async def _connect(self) -> anyio.abc.ByteStream:
        parts = urlsplit(self.url)
        query = dict(parse_qsl(parts.query))
        port = int(query.get("port") or parts.port or DEFAULT_PORT)
        host = query.get("host") or parts.hostname or "127.0.0.1"
        if host.startswith("/"):
            return await anyio.connect_unix(f"{host}/.s.PGSQL.{port}")
        return await anyio.connect_tcp(host, port)

    async def _pump(
        self, source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream, *, replies: bool
    ) -> None:
        with contextlib.suppress(
            anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError
        ):
            while True:
                chunk = await source.receive()
                if replies:
                    self._client_spoke_last = False
                    await self._flowing.wait()
                elif not self._client_spoke_last:
                    self._client_spoke_last = True
                    self.client_turns += 1
                await sink.send(chunk)
        with contextlib.suppress(Exception):
            await sink.aclose()

    async def serve(self, client: anyio.abc.ByteStream) -> None:
        async with client:
            if self._cut_off:
                return
            try:
                server = await self._connect()
            except OSError:
                return
            with anyio.CancelScope() as connection:
                self._connections.add(connection)
                try:
                    async with server, anyio.create_task_group() as tg:
                        tg.start_soon(lambda: self._pump(client, server, replies=False))
                        tg.start_soon(lambda: self._pump(server, client, replies=True))
                finally:
                    self._connections.discard(connection)


@contextlib.asynccontextmanager
async def relay_to(url: str) -> AsyncIterator[Relay]:
    """A running relay to the server of `url`, closed with every connection on exit."""
    relay = Relay(url)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    relay.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, relay.serve)
        try:
            yield relay
        finally:
            relay.flow()
            tg.cancel_scope.cancel()
