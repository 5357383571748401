"""The test suite's SMTP server keeps an account of every attempt the soak can check against:
which port it came in on, the fault it got, what it answered and whether it kept the body."""

from __future__ import annotations

import contextlib
from email.message import EmailMessage

import aiosmtplib
import pytest

from tests.support.smtp_server import DECK_SIZE, Fault, Reply, SmtpServer

pytestmark = pytest.mark.anyio


def message(to: str) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = "noreply@example.com"
    mail["To"] = to
    mail["Subject"] = "Confirm your email address"
    mail["Message-ID"] = f"<verify.{to}>"
    mail.set_content("Open the link.\n")
    return mail


async def send(port: int, *recipients: str) -> None:
    """One message per recipient over one connection; refusals are the server's to record."""
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=5) as smtp:
        for to in recipients:
            with contextlib.suppress(aiosmtplib.SMTPException):
                await smtp.send_message(message(to))
            if not smtp.is_connected:
                await smtp.connect()


async def test_each_transaction_names_the_listener_it_came_in_on() -> None:
    with SmtpServer(listeners=3) as server:
        assert len(set(server.ports)) == 3
        for listener, port in reversed(list(enumerate(server.ports))):
            await send(port, f"via{listener}@example.com")
        logged = {t.recipient: t.listener for t in server.transactions}
    assert logged == {"via2@example.com": 2, "via1@example.com": 1, "via0@example.com": 0}


async def test_random_faults_come_in_exactly_the_planned_mix_in_every_hundred_attempts() -> None:
    with SmtpServer() as server:
        server.set_random_faults({Fault.RCPT_4XX: 0.05, Fault.DATA_5XX: 0.02}, seed=7)
        await send(server.port, *(f"u{n}@example.com" for n in range(DECK_SIZE)))
        faults = [t.fault for t in server.transactions]
    assert (faults.count(Fault.RCPT_4XX), faults.count(Fault.DATA_5XX)) == (5, 2)
    assert faults.count(Fault.ACCEPT) == DECK_SIZE - 7


async def test_random_faults_follow_the_seed() -> None:
    dealt = []
    for _ in range(2):
        with SmtpServer() as server:
            server.set_random_faults({Fault.RCPT_4XX: 0.1}, seed=3)
            await send(server.port, *(f"u{n}@example.com" for n in range(20)))
            dealt.append([t.fault for t in server.transactions])
    assert dealt[0] == dealt[1]


async def test_a_transaction_records_each_reply_and_whether_the_body_was_kept() -> None:
    with SmtpServer() as server:
        server.plan("refused@example.com", Fault.RCPT_5XX)
        server.plan("bounced@example.com", Fault.DATA_4XX)
        server.plan("dropped@example.com", Fault.DROP_AFTER_DATA)
        await send(
            server.port,
            "refused@example.com",
            "bounced@example.com",
            "dropped@example.com",
            "fine@example.com",
        )
        refused, bounced, dropped, fine = server.transactions
    assert (refused.reply_code, refused.body_at, refused.kept) == (550, None, False)
    assert (bounced.reply_code, bounced.kept, bounced.message_id) == (
        451,
        False,
        "<verify.bounced@example.com>",
    )
    assert (dropped.reply, dropped.reply_code, dropped.kept) == ("", None, True)
    assert (fine.reply_code, fine.kept, fine.client_gone) == (250, True, False)
    assert fine.rcpt_at <= (fine.body_at or 0) <= (fine.replied_at or 0) == fine.ended_at


def test_faults_at_mail_from_cannot_be_dealt_at_random() -> None:
    server = SmtpServer()
    for fault in (Fault.DROP_AT_MAIL, Reply("mail", "421 4.3.2 shutting down")):
        with pytest.raises(ValueError, match="plan_mail"):
            server.set_random_faults({fault: 0.1}, seed=1)
