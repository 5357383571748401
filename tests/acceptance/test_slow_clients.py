"""Slow clients against the real `notifier api`: what one connection may hold, and for how long.

The public listener faces strangers, and each held connection counts against
NOTIFIER_HTTP_LIMIT_CONCURRENCY: a client that never finishes its request must be let go,
or a few hundred of them take the listener (and, past the open-file limit, the process).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio
import anyio.abc
import asyncpg
import pytest

from tests.acceptance.test_cli_api import api_env
from tests.support.cli import running_cli

pytestmark = pytest.mark.anyio

# Seconds for the API to start, and the bound within which a stalled client must be let go:
# many times the timeouts set below, so a slow machine cannot fail these tests.
WAIT = 20
# Seconds between the bytes of a trickled body: well inside NOTIFIER_HTTP_BODY_TIMEOUT, so
# no single wait for the next part ever runs out.
TRICKLE_SECONDS = 0.25
BODY = b'{"token": "0123abcd.' + b"x" * 43 + b'"}' + b" " * 40


@pytest.fixture
async def public_port(
    database_url: str, db: asyncpg.Connection, free_tcp_port_factory: Callable[[], int]
) -> AsyncIterator[int]:
    """The public port of a running `notifier api` with one-second HTTP timeouts."""
    port, public = free_tcp_port_factory(), free_tcp_port_factory()
    env = api_env(
        database_url,
        port,
        public,
        NOTIFIER_HTTP_HEADER_TIMEOUT="1",
        NOTIFIER_HTTP_BODY_TIMEOUT="1",
        NOTIFIER_HTTP_KEEPALIVE_TIMEOUT="1",
    )
    async with running_cli("api", env=env) as cli:
        with anyio.fail_after(WAIT):
            await cli.wait_for_line("public pages listening")
        yield public


async def closed_or_answered(stream: anyio.abc.ByteStream) -> bytes:
    """What the server sends before it closes, b"" if it closes without a word."""
    try:
        return await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return b""


@pytest.mark.parametrize(
    "sent",
    [b"", b"GET /verify HTTP/1.1\r\nHost: links\r\n"],
    ids=["nothing", "headers never finished"],
)
async def test_a_connection_that_never_finishes_its_request_is_let_go(
    public_port: int, sent: bytes
) -> None:
    async with await anyio.connect_tcp("127.0.0.1", public_port) as stream:
        if sent:
            await stream.send(sent)
        with anyio.move_on_after(WAIT) as waited:
            reply = await closed_or_answered(stream)
    assert not waited.cancelled_caught, f"the connection was still held after {WAIT}s"
    assert reply == b"" or reply.startswith(b"HTTP/1.1 408"), reply


async def test_a_body_trickled_within_each_parts_timeout_is_still_cut_off(
    public_port: int,
) -> None:
    head = (
        b"POST /v1/verifications/confirm HTTP/1.1\r\nHost: links\r\n"
        b"Content-Type: application/json\r\n" + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
    )
    reply = b""
    async with await anyio.connect_tcp("127.0.0.1", public_port) as stream:
        await stream.send(head)
        # One byte at a time, each well before the per-part timeout: only a bound on the
        # whole body stops this before the last byte (len(BODY) * TRICKLE_SECONDS, ~25s).
        for index in range(len(BODY)):
            await stream.send(BODY[index : index + 1])
            with anyio.move_on_after(TRICKLE_SECONDS):
                reply = await closed_or_answered(stream)
                break
    assert reply.startswith(b"HTTP/1.1 408"), reply or b"the whole body was taken in"


async def test_a_kept_alive_connection_whose_next_head_never_finishes_is_let_go(
    public_port: int,
) -> None:
    async with await anyio.connect_tcp("127.0.0.1", public_port) as stream:
        await stream.send(b"GET /healthz HTTP/1.1\r\nHost: links\r\n\r\n")
        first = b""
        with anyio.fail_after(WAIT):
            while not first.endswith(b"}"):  # the head and the JSON body may come apart
                first += await stream.receive()
        await stream.send(b"GET /healthz HTTP/1.1\r\nHost: li")
        with anyio.move_on_after(WAIT) as waited:
            reply = await closed_or_answered(stream)
    assert first.startswith(b"HTTP/1.1 200"), first
    assert not waited.cancelled_caught, f"the connection was still held after {WAIT}s"
    assert reply == b"" or reply.startswith(b"HTTP/1.1 408"), reply


async def test_pipelined_requests_are_each_answered(public_port: int) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: links\r\n\r\n"
    received = b""
    async with await anyio.connect_tcp("127.0.0.1", public_port) as stream:
        await stream.send(request * 3)
        with anyio.fail_after(WAIT):
            while received.count(b"HTTP/1.1 200") < 3:
                received += await stream.receive()
