"""The dev inbox's check of a message: its links, what the ones to notifier dev answer, and
its lines against RFC 5322. Probes go to a real listener on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import anyio
import pytest
from anyio.abc import SocketStream

from notifier.dev.check import MUST_LINE_CHARS, check, links_of, long_lines, probe, probe_target
from notifier.dev.inbox import Captured, Opened

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def http_server(reply: bytes) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A loopback listener that answers every connection with `reply`; yields its origin and
    the requests it was sent (one per connection accepted)."""
    seen: list[bytes] = []
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def answer(stream: SocketStream) -> None:
        async with stream:
            seen.append(await stream.receive(4096))
            await stream.send(reply)

    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, answer)
        try:
            yield f"http://127.0.0.1:{port}", seen
        finally:
            group.cancel_scope.cancel()


def opened(text: str | None, html: str | None, raw: bytes = b"Subject: x\r\n\r\nx") -> Opened:
    captured = Captured(
        number=1,
        received_at=datetime.now(UTC),
        message_id="<m@x>",
        sender="a@x.test",
        recipients=("b@x.test",),
        subject="x",
        link=None,
        has_html=html is not None,
        code="123 456",
    )
    return Opened(captured=captured, raw=raw, text=text, html=html, headers=())


async def test_a_link_to_notifier_dev_is_fetched_and_its_status_shown() -> None:
    async with http_server(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as (origin, seen):
        answer = await probe(f"{origin}/verify?token=k1.abc", frozenset({origin}))
    assert (answer.answer, answer.status) == ("answered", 200)
    assert seen[0].startswith(b"GET /verify?token=k1.abc HTTP/1.1\r\n")


async def test_a_loopback_link_to_another_local_service_is_never_connected_to() -> None:
    async with http_server(b"HTTP/1.1 200 OK\r\n\r\n") as (origin, seen):
        answer = await probe(f"{origin}/admin", frozenset({"http://127.0.0.1:1"}))
        await anyio.sleep(0.1)
    assert answer.answer == "refused"
    assert seen == []


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1:8001/verify",  # a probed origin's port on another machine
        "https://127.0.0.1:8001/verify",  # another scheme
        "http://127.0.0.1.nip.io:8001/verify",  # a name that would have to be looked up
        "http://127.0.0.1:99999/verify",  # no port at all
        "http://[::1/verify",  # no URL at all
    ],
)
def test_only_an_http_link_to_a_probed_loopback_origin_is_a_target(url: str) -> None:
    probed = frozenset({"http://127.0.0.1:8001", "http://10.0.0.1:8001"})
    assert probe_target(url, probed) is None


def test_localhost_is_taken_as_127_0_0_1_not_looked_up() -> None:
    assert probe_target("http://localhost:8001/v", frozenset({"http://localhost:8001"})) == (
        "127.0.0.1",
        8001,
    )


async def test_a_listener_that_is_gone_reads_as_unreachable() -> None:
    async with http_server(b"") as (origin, _):
        pass
    answer = await probe(f"{origin}/verify", frozenset({origin}))
    assert answer.answer == "unreachable"


async def test_a_reply_without_an_http_status_line_reads_as_unreachable() -> None:
    async with http_server(b"SSH-2.0-OpenSSH\r\n") as (origin, _):
        answer = await probe(f"{origin}/", frozenset({origin}))
    assert (answer.answer, answer.detail) == ("unreachable", "no HTTP status line")


def test_links_are_read_from_the_text_and_from_the_html_anchors() -> None:
    text = "Open http://a.test/v?t=1 or http://a.test/v?t=1 again, or http://b.test/x."
    html = '<a href="http://a.test/v?t=1">go</a><a href="mailto:x@y">mail</a><img src="http://c">'
    assert links_of(text, html) == (
        ["http://a.test/v?t=1", "http://b.test/x."],
        ["http://a.test/v?t=1"],
    )


async def test_parts_that_carry_different_links_disagree() -> None:
    result = await check(
        opened("http://a.test/v?t=1", '<a href="http://a.test/v?t=2">x</a>'), frozenset()
    )
    assert not result.parts_agree
    assert [(link.in_text, link.in_html) for link in result.links] == [(True, False), (False, True)]


async def test_parts_that_carry_the_same_link_agree() -> None:
    result = await check(
        opened("http://a.test/v?t=1", '<a href="http://a.test/v?t=1">x</a>'), frozenset()
    )
    assert result.parts_agree and len(result.links) == 1


def test_lines_over_78_are_counted_and_those_over_998_marked() -> None:
    raw = b"a: b\r\n" + b"x" * 79 + b"\r\n" + b"y" * 78 + b"\r\n" + b"z" * (MUST_LINE_CHARS + 1)
    found = long_lines(raw)
    assert [(line.number, line.length, line.over_limit) for line in found] == [
        (2, 79, False),
        (4, MUST_LINE_CHARS + 1, True),
    ]


async def test_the_check_reports_the_messages_size_and_code() -> None:
    raw = b"Subject: x\r\n\r\n" + b"body" * 10
    result = await check(opened("body", None, raw), frozenset())
    assert (result.size, result.code, result.has_html) == (len(raw), "123 456", False)
