"""The SMTP transport against a real, fault-injecting SMTP server: every outcome, and the pool."""

from __future__ import annotations

import email
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme

from notifier.delivery.mailer import (
    NullTransport,
    SendResult,
    SmtpTransport,
    transport_from_settings,
)
from notifier.delivery.messages import OutgoingMessage
from tests.support.smtp_server import Fault, HoldAtRcpt, SlowData, SmtpServer

pytestmark = pytest.mark.anyio


@pytest.fixture(
    params=[pytest.param({}, id="asyncio"), pytest.param({"use_uvloop": True}, id="uvloop")]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    # Both loops a command may run on (notifier.event_loop): transports and TLS differ.
    return ("asyncio", request.param)


def message(recipient: str = "bob@example.com", n: int = 1) -> OutgoingMessage:
    return OutgoingMessage(
        message_id=f"<verify.00000000-0000-4000-8000-{n:012d}@example.com>",
        sender="notifier@example.com",
        recipient=recipient,
        subject="Confirm your email address",
        text="Open https://app.example.com/verify?token=t\n",
        html="<p><a href='https://app.example.com/verify?token=t'>Confirm</a></p>\n",
    )


class Gate:
    """A gate that answers as told (or raises what it is given) and counts its questions."""

    def __init__(
        self, begin: bool = True, body: bool = True, error: Exception | None = None
    ) -> None:
        self.begin, self.body, self.error = begin, body, error
        self.begin_calls = self.body_calls = 0

    async def may_begin(self) -> bool:
        self.begin_calls += 1
        if self.error is not None and not self.begin:
            raise self.error
        return self.begin

    def may_send_body(self) -> bool:
        self.body_calls += 1
        if self.error is not None and not self.body:
            raise self.error
        return self.body


@asynccontextmanager
async def transport(server: SmtpServer, **settings: Any) -> AsyncIterator[SmtpTransport]:
    smtp = SmtpTransport(server.settings(**settings))
    try:
        yield smtp
    finally:
        await smtp.aclose()


async def send(
    smtp: SmtpTransport,
    msg: OutgoingMessage | None = None,
    gate: Gate | None = None,
) -> SendResult:
    return await smtp.send(msg or message(), gate or Gate())


async def test_accepted_message_is_sent_with_the_provider_id(smtp_server: SmtpServer) -> None:
    async with transport(smtp_server) as smtp:
        result = await send(smtp)
    assert result.outcome == "sent"
    assert result.code == 250
    assert result.body_sent
    (received,) = smtp_server.kept
    assert received.reply == f"250 {result.provider_message_id}"
    assert result.provider_message_id is not None
    assert result.provider_message_id.startswith("2.0.0 Ok: queued as ")
    assert received.recipients == ["bob@example.com"]
    assert received.sender == "notifier@example.com"
    assert result.duration > 0


async def test_recipient_4xx_is_transient(smtp_server: SmtpServer) -> None:
    smtp_server.plan("bob@example.com", Fault.RCPT_4XX)
    async with transport(smtp_server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.code, result.body_sent) == ("transient", 451, False)
    assert result.reply == "4.3.0 try again later"
    assert smtp_server.received == []


async def test_recipient_5xx_is_permanent_and_its_reply_is_redacted(
    smtp_server: SmtpServer,
) -> None:
    smtp_server.plan("bob@example.com", Fault.RCPT_5XX)
    async with transport(smtp_server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.code, result.body_sent) == ("permanent", 550, False)
    assert result.reply == "5.1.1 <b***@example.com>: user unknown"
    assert "bob@" not in repr(result)


async def test_refused_recipient_leaves_the_connection_reusable(smtp_server: SmtpServer) -> None:
    smtp_server.plan("bob@example.com", Fault.RCPT_5XX)
    async with transport(smtp_server) as smtp:
        assert (await send(smtp, message(n=1))).outcome == "permanent"
        assert (await send(smtp, message(n=2))).outcome == "sent"
    assert smtp_server.connections_opened == 1


async def test_data_4xx_is_transient(smtp_server: SmtpServer) -> None:
    smtp_server.plan("bob@example.com", Fault.DATA_4XX)
    async with transport(smtp_server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.code, result.body_sent) == ("transient", 451, True)
    (received,) = smtp_server.received
    assert not received.kept


async def test_data_5xx_is_permanent(smtp_server: SmtpServer) -> None:
    smtp_server.plan("bob@example.com", Fault.DATA_5XX)
    async with transport(smtp_server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.code, result.body_sent) == ("permanent", 554, True)
    assert smtp_server.kept == []


async def test_reply_slower_than_data_timeout_is_unknown_and_the_server_kept_it(
    smtp_server: SmtpServer,
) -> None:
    smtp_server.plan("bob@example.com", SlowData(seconds=2.0))
    async with transport(smtp_server, data_timeout=0.3) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.code, result.body_sent) == ("unknown", None, True)
    assert 0.3 <= result.duration < 2.0
    assert [r.message_id for r in smtp_server.kept] == [message().message_id]


async def test_connection_dropped_after_the_body_is_unknown_and_the_server_kept_it(
    smtp_server: SmtpServer,
) -> None:
    smtp_server.plan("bob@example.com", Fault.DROP_AFTER_DATA)
    async with transport(smtp_server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.code, result.body_sent) == ("unknown", None, True)
    (received,) = smtp_server.kept
    assert received.reply == ""


async def test_stale_pooled_connection_dropped_at_mail_is_retried_on_a_fresh_one(
    smtp_server: SmtpServer,
) -> None:
    async with transport(smtp_server, pool_size=1) as smtp:
        assert (await send(smtp, message(n=1))).outcome == "sent"
        smtp_server.plan_mail(Fault.DROP_AT_MAIL)
        result = await send(smtp, message(n=2))
    assert result.outcome == "sent"
    assert smtp_server.connections_opened == 2
    assert [r.message_id for r in smtp_server.kept] == [
        message(n=1).message_id,
        message(n=2).message_id,
    ]


async def test_fresh_connection_dropped_at_mail_is_transient(smtp_server: SmtpServer) -> None:
    smtp_server.plan_mail(Fault.DROP_AT_MAIL)
    async with transport(smtp_server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.code, result.body_sent) == ("transient", None, False)
    assert smtp_server.connections_opened == 1


async def test_connection_refused_is_transient() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The port is now free and nothing listens on it.
    smtp = SmtpTransport(SmtpServer(port).settings())
    try:
        result = await send(smtp)
    finally:
        await smtp.aclose()
    assert (result.outcome, result.code, result.body_sent) == ("transient", None, False)
    assert result.reply is not None and "connect" in result.reply.lower()


async def test_a_gate_closed_before_data_aborts_without_storing_and_keeps_the_connection() -> None:
    # Without PIPELINING the gate is asked before DATA, so RSET saves the connection (with
    # it, DATA has gone already: test_smtp_pipelining).
    closed = Gate(body=False)
    with SmtpServer(pipelining=False) as smtp_server:
        async with transport(smtp_server) as smtp:
            aborted = await send(smtp, message(n=1), closed)
            assert smtp_server.received == []
            sent = await send(smtp, message(n=2))
        assert smtp_server.connections_opened == 1
        assert [r.message_id for r in smtp_server.received] == [message(n=2).message_id]
    assert (closed.begin_calls, closed.body_calls) == (1, 1)
    assert (aborted.outcome, aborted.body_sent) == ("aborted", False)
    assert sent.outcome == "sent"


async def test_a_gate_closed_before_the_envelope_aborts_without_touching_the_server(
    smtp_server: SmtpServer,
) -> None:
    closed = Gate(begin=False)
    async with transport(smtp_server) as smtp:
        aborted = await send(smtp, gate=closed)
    assert (aborted.outcome, closed.body_calls) == ("aborted", 0)
    assert smtp_server.connections_opened == 0


async def test_a_gate_failing_before_the_body_aborts(smtp_server: SmtpServer) -> None:
    broken = Gate(body=False, error=ConnectionError("clock unreadable"))
    async with transport(smtp_server) as smtp:
        result = await send(smtp, gate=broken)
    assert result.outcome == "aborted"
    assert smtp_server.received == []


async def test_a_gate_failing_before_the_envelope_aborts(smtp_server: SmtpServer) -> None:
    broken = Gate(begin=False, error=ConnectionError("database unreachable"))
    async with transport(smtp_server) as smtp:
        result = await send(smtp, gate=broken)
    assert result.outcome == "aborted"
    assert smtp_server.connections_opened == 0


async def test_the_body_gate_is_asked_only_after_the_recipient_is_accepted(
    smtp_server: SmtpServer,
) -> None:
    smtp_server.plan("bob@example.com", Fault.RCPT_5XX)
    gate = Gate()
    async with transport(smtp_server) as smtp:
        await send(smtp, gate=gate)
    assert (gate.begin_calls, gate.body_calls) == (1, 0)


async def test_the_envelope_gate_is_asked_once_a_connection_is_free(
    smtp_server: SmtpServer,
) -> None:
    hold = HoldAtRcpt()
    smtp_server.plan("held@example.com", hold)
    waiting = Gate()
    async with transport(smtp_server, pool_size=1) as smtp, anyio.create_task_group() as tg:
        tg.start_soon(send, smtp, message("held@example.com"))
        await hold.wait_reached()
        tg.start_soon(send, smtp, message(n=2), waiting)
        await anyio.sleep(0.2)
        assert waiting.begin_calls == 0  # still queued for the only connection
        hold.release.set()
    assert (waiting.begin_calls, waiting.body_calls) == (1, 1)


async def test_a_resent_message_carries_the_same_message_id(smtp_server: SmtpServer) -> None:
    smtp_server.plan("bob@example.com", Fault.DROP_AFTER_DATA)
    async with transport(smtp_server) as smtp:
        first = await send(smtp, message(n=7))
        second = await send(smtp, message(n=7))
    assert (first.outcome, second.outcome) == ("unknown", "sent")
    ids = [r.message_id for r in smtp_server.kept]
    assert ids == [message(n=7).message_id] * 2
    headers = [email.message_from_bytes(r.content)["Message-ID"] for r in smtp_server.kept]
    assert headers == ids


async def test_concurrent_sends_never_open_more_connections_than_the_pool_size(
    smtp_server: SmtpServer,
) -> None:
    count = 10
    results: list[SendResult] = []
    for n in range(count):
        # Slow enough that every send overlaps others and has to queue for a connection.
        smtp_server.plan(f"user{n}@example.com", SlowData(seconds=0.05))
    async with transport(smtp_server, pool_size=2) as smtp:

        async def one(n: int) -> None:
            results.append(await send(smtp, message(f"user{n}@example.com", n)))

        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(one, n)
    assert [r.outcome for r in results] == ["sent"] * count
    assert smtp_server.connections_opened == 2
    assert smtp_server.peak_open_connections == 2
    received = await smtp_server.wait_for(count)
    assert sorted(r.recipients[0] for r in received) == sorted(
        f"user{n}@example.com" for n in range(count)
    )


async def test_send_cancelled_before_data_discards_its_connection(
    smtp_server: SmtpServer,
) -> None:
    hold = HoldAtRcpt()
    smtp_server.plan("bob@example.com", hold)
    async with transport(smtp_server, pool_size=1) as smtp:
        async with anyio.create_task_group() as tg:
            tg.start_soon(send, smtp, message(n=1))
            await hold.wait_reached()
            tg.cancel_scope.cancel()
        hold.release.set()
        assert (await send(smtp, message(n=2))).outcome == "sent"
    assert smtp_server.connections_opened == 2
    assert [r.message_id for r in smtp_server.received] == [message(n=2).message_id]


async def test_cancellation_during_data_waits_for_the_reply_instead_of_guessing(
    smtp_server: SmtpServer,
) -> None:
    smtp_server.plan("bob@example.com", SlowData(seconds=0.5))
    async with transport(smtp_server, pool_size=1) as smtp:
        started = anyio.current_time()
        with anyio.move_on_after(0.1):
            await send(smtp, message(n=1))
        # The shield held the send until the server answered: no unknown outcome was made.
        assert anyio.current_time() - started >= 0.5
        assert (await send(smtp, message(n=2))).outcome == "sent"
    assert smtp_server.connections_opened == 1
    assert len(smtp_server.kept) == 2


async def test_non_ascii_recipient_is_sent_with_smtputf8(smtp_server: SmtpServer) -> None:
    async with transport(smtp_server) as smtp:
        result = await send(smtp, message("jösé@exämple.com"))
    assert result.outcome == "sent"
    (received,) = smtp_server.kept
    assert received.recipients == ["jösé@exämple.com"]
    assert "To: jösé@exämple.com".encode() in received.content


async def test_settings_the_server_cannot_honour_are_transient_and_logged_once(
    smtp_server: SmtpServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The server offers no AUTH on a plain connection, so the credentials cannot be used.
    async with transport(smtp_server, username="notifier", password="secret") as smtp:
        first = await send(smtp, message(n=1))
        second = await send(smtp, message(n=2))
    assert (first.outcome, second.outcome) == ("transient", "transient")
    assert not first.body_sent
    errors = [
        r for r in caplog.records if r.levelname == "ERROR" and r.name == "notifier.delivery.mailer"
    ]
    assert len(errors) == 1
    assert "configuration problem" in errors[0].getMessage()
    assert smtp_server.received == []


async def test_null_transport_asks_the_gate_and_reports_sent() -> None:
    null = transport_from_settings("null", SmtpServer(1).settings())
    assert isinstance(null, NullTransport)
    gate = Gate()
    result = await null.send(message(), gate)
    assert (result.outcome, result.provider_message_id) == ("sent", "null")
    assert (gate.begin_calls, gate.body_calls) == (1, 1)
    assert (await null.send(message(), Gate(body=False))).outcome == "aborted"
    await null.aclose()


async def test_smtp_kind_builds_an_smtp_transport(smtp_server: SmtpServer) -> None:
    smtp = transport_from_settings("smtp", smtp_server.settings())
    try:
        assert isinstance(smtp, SmtpTransport)
        assert (await smtp.send(message(), Gate())).outcome == "sent"
    finally:
        await smtp.aclose()


@pytest.fixture
def authority() -> Any:
    return trustme.CA()


@pytest.mark.parametrize("mode", ["starttls", "tls"])
async def test_tls_modes_deliver_to_a_server_whose_certificate_is_trusted(
    mode: str, authority: Any, tmp_path: Path, free_tcp_port_factory: Callable[[], int]
) -> None:
    ca_file = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    certificate = authority.issue_cert("127.0.0.1", "localhost")
    with SmtpServer(free_tcp_port_factory(), tls=mode, certificate=certificate) as server:  # type: ignore[arg-type]
        async with transport(server, ca_file=ca_file) as smtp:
            result = await send(smtp, message())
        assert result.outcome == "sent", result
        assert len(server.kept) == 1


async def test_a_certificate_from_an_untrusted_authority_is_refused(
    authority: Any, free_tcp_port_factory: Callable[[], int]
) -> None:
    certificate = authority.issue_cert("127.0.0.1", "localhost")
    with SmtpServer(free_tcp_port_factory(), tls="starttls", certificate=certificate) as server:
        async with transport(server) as smtp:
            result = await send(smtp, message())
        assert (result.outcome, result.body_sent) == ("transient", False)
        assert server.received == []
