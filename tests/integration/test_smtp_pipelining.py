"""The SMTP transaction as it goes on the wire: MAIL, RCPT and DATA in one write when the
server offers PIPELINING (RFC 2920), one at a time when it does not, and every reply judged
on its own whichever way they arrived. Against a scripted server that records its reads and
answers a whole read in one write."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from notifier.delivery.mailer import SendResult, SmtpTransport
from notifier.delivery.messages import OutgoingMessage
from tests.support.scripted_smtp import ScriptedSmtp

pytestmark = pytest.mark.anyio


@pytest.fixture(
    params=[pytest.param({}, id="asyncio"), pytest.param({"use_uvloop": True}, id="uvloop")]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, bool]]:
    # Both loops a command may run on (notifier.event_loop): transports and TLS differ.
    return ("asyncio", request.param)


def message(text: str = "Open https://app.example.com/verify?token=t\n") -> OutgoingMessage:
    return OutgoingMessage(
        message_id="<verify.00000000-0000-4000-8000-000000000001@example.com>",
        sender="notifier@example.com",
        recipient="bob@example.com",
        subject="Confirm your email address",
        text=text,
        html="<p><a href='https://app.example.com/verify?token=t'>Confirm</a></p>\n",
    )


class Gate:
    def __init__(self, body: bool = True) -> None:
        self.body = body

    async def may_begin(self) -> bool:
        return True

    def may_send_body(self) -> bool:
        return self.body


@asynccontextmanager
async def scripted(server: ScriptedSmtp) -> AsyncIterator[SmtpTransport]:
    async with server.running():
        smtp = SmtpTransport(server.settings())
        try:
            yield smtp
        finally:
            await smtp.aclose()


async def send(
    smtp: SmtpTransport, gate: Gate | None = None, msg: OutgoingMessage | None = None
) -> SendResult:
    return await smtp.send(msg or message(), gate or Gate())


def commands_in(read: bytes) -> list[bytes]:
    return [line.split(b" ")[0].split(b":")[0] for line in read.split(b"\r\n") if line]


async def test_with_pipelining_mail_rcpt_and_data_leave_in_one_write() -> None:
    server = ScriptedSmtp()
    async with scripted(server) as smtp:
        result = await send(smtp)
    assert result.outcome == "sent"
    assert [b"MAIL", b"RCPT", b"DATA"] in [commands_in(read) for read in server.reads]
    assert len(server.bodies) == 1


async def test_without_pipelining_each_command_is_its_own_write() -> None:
    server = ScriptedSmtp(pipelining=False)
    async with scripted(server) as smtp:
        result = await send(smtp)
    assert result.outcome == "sent"
    envelope_reads = [commands_in(r) for r in server.reads if r.startswith((b"MAIL", b"RCPT"))]
    assert envelope_reads == [[b"MAIL"], [b"RCPT"]]
    assert [b"DATA"] in [commands_in(read) for read in server.reads]


async def test_a_refused_sender_is_the_senders_refusal_though_rcpt_and_data_fail_after_it() -> None:
    server = ScriptedSmtp(
        replies={
            "MAIL": "550 5.7.1 sender rejected",
            "RCPT": "503 5.5.1 need MAIL first",
            "DATA": "503 5.5.1 need RCPT first",
        }
    )
    async with scripted(server) as smtp:
        result = await send(smtp)
        assert (result.outcome, result.code, result.refusal) == ("permanent", 550, "configuration")
        assert "sender rejected" in (result.reply or "")
        await send(smtp)
    assert server.connections == 1  # RSET put the session back in step
    assert server.bodies == []


async def test_a_refused_recipient_after_a_pipelined_mail_is_the_recipients_refusal() -> None:
    server = ScriptedSmtp(
        replies={"RCPT": "550 5.1.1 user unknown", "DATA": "554 5.5.1 no valid recipients"}
    )
    async with scripted(server) as smtp:
        result = await send(smtp)
        assert (result.outcome, result.code, result.refusal) == ("permanent", 550, "recipient")
        assert result.body_sent is False
        await send(smtp)
    assert server.connections == 1


async def test_a_refused_data_after_accepted_envelope_is_judged_by_its_own_code() -> None:
    server = ScriptedSmtp(replies={"DATA": "451 4.3.0 try again later"})
    async with scripted(server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.code, result.body_sent) == ("transient", 451, False)


async def test_a_354_after_a_refused_recipient_gets_no_body_and_the_connection_is_dropped() -> None:
    server = ScriptedSmtp(replies={"RCPT": "550 5.1.1 user unknown"})
    async with scripted(server) as smtp:
        result = await send(smtp)
        assert (result.outcome, result.refusal) == ("permanent", "recipient")
        server.replies = {}
        assert (await send(smtp)).outcome == "sent"
    assert len(server.bodies) == 1  # only the second message's
    assert server.connections == 2


async def test_a_gate_closed_after_354_sends_no_body_and_drops_the_connection() -> None:
    server = ScriptedSmtp()
    async with scripted(server) as smtp:
        aborted = await send(smtp, Gate(body=False))
        assert (aborted.outcome, aborted.body_sent) == ("aborted", False)
        assert (await send(smtp)).outcome == "sent"
    assert len(server.bodies) == 1
    assert server.connections == 2


async def test_a_354_that_never_comes_is_transient_not_unknown() -> None:
    server = ScriptedSmtp(replies={"DATA": ""}, command_timeout=0.3)
    async with scripted(server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.body_sent) == ("transient", False)
    assert server.bodies == []


async def test_a_body_reply_that_never_comes_is_unknown() -> None:
    server = ScriptedSmtp(replies={"BODY": ""}, command_timeout=0.3)
    async with scripted(server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.body_sent) == ("unknown", True)
    assert len(server.bodies) == 1


async def test_a_multi_line_refusal_is_one_reply_with_every_line() -> None:
    server = ScriptedSmtp(
        replies={"RCPT": "550-5.1.1 the mailbox is unknown\r\n550 5.1.1 see the docs"}
    )
    async with scripted(server) as smtp:
        result = await send(smtp)
    assert (result.outcome, result.code, result.refusal) == ("permanent", 550, "recipient")
    assert "unknown" in (result.reply or "") and "see the docs" in (result.reply or "")


async def test_a_reply_that_does_not_parse_is_transient_and_drops_the_connection() -> None:
    server = ScriptedSmtp(replies={"RCPT": "hello there"})
    async with scripted(server) as smtp:
        result = await send(smtp)
        assert (result.outcome, result.body_sent) == ("transient", False)
        server.replies = {}
        assert (await send(smtp)).outcome == "sent"
    assert server.connections == 2


async def test_an_unsolicited_reply_drops_the_pooled_connection() -> None:
    server = ScriptedSmtp(unsolicited="421 4.4.2 idle too long, closing")
    async with scripted(server) as smtp:
        assert (await send(smtp)).outcome == "sent"
        assert (await send(smtp)).outcome == "sent"
    assert server.connections == 2
    assert len(server.bodies) == 2


async def test_an_address_that_cannot_stand_on_a_command_line_is_refused_before_any_write() -> None:
    server = ScriptedSmtp()
    bad = dataclasses.replace(message(), recipient="bob@example.com> NOTIFY=NEVER")
    async with scripted(server) as smtp:
        result = await send(smtp, msg=bad)
    assert (result.outcome, result.refusal) == ("permanent", "message")
    assert not any(b"MAIL" in read or b"RCPT" in read for read in server.reads)


async def test_a_line_starting_with_a_dot_is_stuffed_on_the_wire() -> None:
    server = ScriptedSmtp()
    async with scripted(server) as smtp:
        await send(smtp, msg=message(text="first\n.second\n"))
    assert b"\r\n..second\r\n" in server.bodies[0]
