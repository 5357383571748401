"""One SMTP connection's mail transactions, after aiosmtplib has connected, greeted, secured
and authenticated it: MAIL, RCPT and DATA in one write when the server offers PIPELINING
(RFC 2920), one at a time otherwise, then the body in wire form.

aiosmtplib's protocol keeps one reply at a time (a second reply arriving in the same read
is dropped), so it cannot read pipelined replies; and each of its commands parses and
quotes the address, normalises line endings and dot-stuffs the body again, and waits with
its own timer task. Here the connection's transport is handed to a protocol that queues
every reply it reads, in order, so the replies to one write are judged one by one.

Failures raise aiosmtplib's exceptions (SMTPSenderRefused, SMTPRecipientRefused,
SMTPDataError, SMTPReadTimeoutError, SMTPServerDisconnected, SMTPResponseException), so
notifier.delivery.smtp_replies judges them whichever path raised them.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import anyio
from aiosmtplib import (
    SMTP,
    SMTPDataError,
    SMTPException,
    SMTPReadTimeoutError,
    SMTPRecipientRefused,
    SMTPResponse,
    SMTPResponseException,
    SMTPSenderRefused,
    SMTPServerDisconnected,
)

from notifier.delivery.smtp_replies import Phase

# RFC 5321 allows reply lines of 512 octets; servers send longer texts, none this long.
MAX_REPLY_LINE = 8192
# A reply of more lines than any EHLO answer, or unread replies beyond those expected, is a
# server out of step: the connection is dropped rather than buffered without end.
MAX_REPLY_LINES = 256
# aiosmtplib's code for a reply that does not parse.
MALFORMED = -1
START_INPUT = 354
OK_CODES = frozenset({250, 251})
# What may not appear in an address on a command line: a space, an angle bracket or a
# control character would end the path or smuggle in parameters or a command.
_NOT_IN_PATH = re.compile(r"[\x00-\x20\x7f<>]")


def path_of(address: str) -> str:
    """`address` as a reverse- or forward-path, `<local@domain>`; ValueError (a message
    that can never be sent) if it could not stand alone on a command line."""
    if not address or _NOT_IN_PATH.search(address):
        raise ValueError(f"the address {address!r} cannot be put on an SMTP command line")
    return f"<{address}>"


@dataclass(frozen=True, slots=True)
class Envelope:
    """A transaction's MAIL and RCPT command lines, built once per send, and the addresses
    they name (for the exceptions a refusal raises)."""

    sender: str
    recipient: str
    mail: bytes
    rcpt: bytes

    @classmethod
    def build(
        cls,
        sender: str,
        recipient: str,
        *,
        mail_options: list[str],
        rcpt_options: list[str],
        utf8: bool,
    ) -> Envelope:
        encoding = "utf-8" if utf8 else "ascii"
        mail = " ".join([f"MAIL FROM:{path_of(sender)}", *mail_options])
        rcpt = " ".join([f"RCPT TO:{path_of(recipient)}", *rcpt_options])
        # An option is ours (SIZE, BODY, ENVID with a decimal id): never a control character.
        return cls(
            sender,
            recipient,
            f"{mail}\r\n".encode(encoding),
            f"{rcpt}\r\n".encode(encoding),
        )


@dataclass(slots=True)
class Progress:
    """How far a transaction got, for judging its failure: the phase whose reply was awaited,
    and whether any of the body may have left (after that a lost connection is an unknown
    outcome)."""

    phase: Phase = "mail"
    body_sent: bool = False


class Session(asyncio.Protocol):
    """The reply side of one connection: every complete reply read, queued in order."""

    def __init__(self, extensions: dict[str, str]) -> None:
        self.extensions = extensions
        self.pipelining = "pipelining" in extensions
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.WriteTransport | None = None
        self._buffer = bytearray()
        self._lines: list[str] = []
        self._code = MALFORMED
        self._replies: deque[SMTPResponse | Exception] = deque()
        self._waiter: asyncio.Future[None] | None = None
        # Replies the session has asked for and not yet read; any other reply is unsolicited.
        self._expected = 0
        self._writable: asyncio.Future[None] | None = None

    @classmethod
    def take_over(cls, client: SMTP) -> Session:
        """Move `client`'s connection, greeted and ready for MAIL, to a new Session; the
        client must not be used afterwards."""
        protocol = client.protocol
        if protocol is None or protocol.transport is None or not client.is_connected:
            raise SMTPServerDisconnected("the connection was lost before the transaction")
        transport = cast(asyncio.WriteTransport, protocol.transport)
        session = cls(dict(client.esmtp_extensions))
        transport.set_protocol(session)
        session._transport = transport
        # aiosmtplib's client forgets the connection without closing it.
        client.protocol = None
        client.transport = None
        return session

    # What the server offered

    def supports(self, extension: str) -> bool:
        return extension in self.extensions

    @property
    def is_connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    # Writing and reading

    def send(self, data: bytes, replies: int) -> None:
        """Write `data`, which asks for `replies` replies."""
        transport = self._transport
        if transport is None or transport.is_closing():
            raise SMTPServerDisconnected("Connection lost")
        self._expected += replies
        transport.write(data)

    async def drained(self) -> None:
        """Until the transport has room again, when a large body filled its buffer."""
        if self._writable is not None:
            await self._writable

    async def reply(self, within: float) -> SMTPResponse:
        """The next reply; SMTPReadTimeoutError if none comes `within` seconds,
        SMTPServerDisconnected if the connection ends first."""
        if not self._replies:
            waiter = self._waiter = self._loop.create_future()
            # A timer callback, not a cancel scope or wait_for: the cheapest bound on a wait.
            timer = self._loop.call_later(within, _time_out, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        answer = self._replies.popleft()
        if isinstance(answer, Exception):
            self._replies.appendleft(answer)  # every later read fails the same way
            raise answer
        self._expected -= 1
        return answer

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # asyncio.Protocol

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        start = len(buffer)
        buffer.extend(data)
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                if len(buffer) > MAX_REPLY_LINE:
                    self._fail(SMTPResponseException(MALFORMED, "Response too long"))
                return
            line = bytes(buffer[: end + 1])
            del buffer[: end + 1]
            start = 0
            if not self._take_line(line):
                return

    def connection_lost(self, exc: Exception | None) -> None:
        lost = SMTPServerDisconnected("Connection lost")
        if exc is not None:
            lost.__cause__ = exc
        self._fail(lost, close=False)
        self._transport = None
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def eof_received(self) -> bool:
        self._fail(SMTPServerDisconnected("Unexpected EOF received"))
        return False

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    # Parsing

    def _take_line(self, line: bytes) -> bool:
        """Add one line to the reply being read; False once the session has failed."""
        if len(line) > MAX_REPLY_LINE:
            self._fail(SMTPResponseException(MALFORMED, "Response too long"))
            return False
        digits, separator = line[:3], line[3:4]
        if not (digits.isdigit() and len(digits) == 3 and separator in (b" ", b"-", b"\r", b"\n")):
            text = line.decode("utf-8", "replace").strip()
            self._fail(SMTPResponseException(MALFORMED, f"Malformed SMTP response line: {text}"))
            return False
        code = int(digits)
        if self._lines and code != self._code:
            self._fail(SMTPResponseException(MALFORMED, "a multi-line reply changed its code"))
            return False
        self._code = code
        self._lines.append(line[4:].strip(b" \t\r\n").decode("utf-8", "surrogateescape"))
        if separator == b"-":
            if len(self._lines) > MAX_REPLY_LINES:
                self._fail(SMTPResponseException(MALFORMED, "Response too long"))
                return False
            return True
        reply = SMTPResponse(code, "\n".join(self._lines))
        self._lines = []
        if len(self._replies) >= self._expected:
            # Nothing asked for it (a 421 while pooled, a server out of step): the session
            # cannot be trusted to pair replies with commands any more.
            self._fail(SMTPServerDisconnected(f"unsolicited reply from the server: {code}"))
            return False
        self._replies.append(reply)
        self._wake()
        return True

    def _fail(self, exc: Exception, *, close: bool = True) -> None:
        if not (self._replies and isinstance(self._replies[-1], Exception)):
            self._replies.append(exc)
        self._wake()
        if close and self._transport is not None:
            self._transport.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(SMTPReadTimeoutError("Timed out waiting for server response"))


async def transact(
    session: Session,
    envelope: Envelope,
    wire: bytes,
    may_send_body: Callable[[], bool],
    progress: Progress,
    *,
    command_timeout: float,
    data_timeout: float,
) -> SMTPResponse | None:
    """One mail transaction: the server's reply to the body, or None when `may_send_body`
    said no (nothing was sent; the session is reset, or closed if it cannot be). Refusals
    raise; `progress` says how far the transaction got."""
    run = _pipelined if session.pipelining else _one_by_one
    return await run(
        session, envelope, wire, may_send_body, progress, command_timeout, data_timeout
    )


async def _pipelined(
    session: Session,
    envelope: Envelope,
    wire: bytes,
    may_send_body: Callable[[], bool],
    progress: Progress,
    command_timeout: float,
    data_timeout: float,
) -> SMTPResponse | None:
    progress.phase = "mail"
    session.send(envelope.mail + envelope.rcpt + b"DATA\r\n", 3)
    mail = await session.reply(command_timeout)
    progress.phase = "rcpt"
    rcpt = await session.reply(command_timeout)
    progress.phase = "data"
    data = await session.reply(command_timeout)
    # Judged in order: a refused sender explains the refused recipient and DATA after it.
    refusal: SMTPResponseException | None = None
    if mail.code not in OK_CODES:
        progress.phase = "mail"
        refusal = SMTPSenderRefused(mail.code, mail.message, envelope.sender)
    elif rcpt.code not in OK_CODES:
        progress.phase = "rcpt"
        refusal = SMTPRecipientRefused(rcpt.code, rcpt.message, envelope.recipient)
    elif data.code != START_INPUT:
        refusal = SMTPDataError(data.code, data.message)
    if data.code == START_INPUT and (refusal is not None or not may_send_body()):
        # The server waits for a body that must not come. Closing the connection before
        # the final dot makes every server discard the transaction.
        session.close()
        if refusal is not None:
            raise refusal
        return None
    if refusal is not None:
        raise refusal
    return await _body(session, wire, progress, data_timeout)


async def _one_by_one(
    session: Session,
    envelope: Envelope,
    wire: bytes,
    may_send_body: Callable[[], bool],
    progress: Progress,
    command_timeout: float,
    data_timeout: float,
) -> SMTPResponse | None:
    progress.phase = "mail"
    session.send(envelope.mail, 1)
    mail = await session.reply(command_timeout)
    if mail.code not in OK_CODES:
        raise SMTPSenderRefused(mail.code, mail.message, envelope.sender)
    progress.phase = "rcpt"
    session.send(envelope.rcpt, 1)
    rcpt = await session.reply(command_timeout)
    if rcpt.code not in OK_CODES:
        raise SMTPRecipientRefused(rcpt.code, rcpt.message, envelope.recipient)
    if not may_send_body():
        await reset(session, command_timeout)
        return None
    progress.phase = "data"
    session.send(b"DATA\r\n", 1)
    data = await session.reply(command_timeout)
    if data.code != START_INPUT:
        raise SMTPDataError(data.code, data.message)
    return await _body(session, wire, progress, data_timeout)


async def _body(
    session: Session, wire: bytes, progress: Progress, data_timeout: float
) -> SMTPResponse:
    if not session.is_connected:
        # The server hung up while the gate decided: the body never left.
        raise SMTPServerDisconnected("the connection was lost before the body")
    progress.body_sent = True
    # Shielded: once the body may be going out, a cancellation (shutdown) could only turn
    # a delivery into an unknown outcome. The data timeout still bounds the wait.
    with anyio.CancelScope(shield=True):
        session.send(wire, 1)
        await session.drained()
        answer = await session.reply(data_timeout)
    if answer.code not in OK_CODES:
        raise SMTPDataError(answer.code, answer.message)
    return answer


async def reset(session: Session, within: float) -> bool:
    """RSET after a refusal (or a body not sent); True if the session is fit to be reused.
    A session that cannot be reset is closed."""
    try:
        session.send(b"RSET\r\n", 1)
        answer = await session.reply(within)
    except (SMTPException, OSError):
        session.close()
        return False
    if answer.code != 250:
        session.close()
        return False
    return True


async def quit_session(session: Session, within: float) -> None:
    """QUIT, as a courtesy; the session is closed whatever the server answers."""
    try:
        session.send(b"QUIT\r\n", 1)
        await session.reply(within)
    except (SMTPException, OSError):
        pass
    finally:
        session.close()
