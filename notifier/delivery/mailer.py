"""The mail transport: SMTP over a pool of reused connections, and a null one for benchmarks.

What each reply or failure means is decided in notifier.delivery.smtp_replies."""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from typing import Protocol, assert_never

import anyio
from aiosmtplib import SMTP, SMTPHeloError, SMTPServerDisconnected

from notifier.config import SmtpSettings, TransportKind
from notifier.delivery.messages import OutgoingMessage
from notifier.delivery.smtp_replies import (
    describe,
    kept_text,
    leaves_connection_usable,
    verdict_of,
)
from notifier.delivery.smtp_session import (
    Envelope,
    Progress,
    Session,
    quit_session,
    reset,
    transact,
)
from notifier.outcomes import Refusal, SendOutcome
from notifier.redact import redact_text

log = logging.getLogger(__name__)


class Gate(Protocol):
    """What a send asks its owner (the worker: its lease, its link) on the way out. False,
    or an exception, means the message must not go out."""

    async def may_begin(self) -> bool:
        """Once a connection is free and before MAIL FROM. It may wait on I/O (a database
        check): no SMTP command is outstanding, so no server is kept waiting mid-transaction."""
        ...

    def may_send_body(self) -> bool:
        """After RCPT and immediately before DATA. No I/O: a plain function, since the
        connection must not idle between RCPT and DATA (a database round trip there once
        idled every pooled connection)."""
        ...


NO_SMTPUTF8 = (
    "the server does not offer SMTPUTF8, which an address with non-ASCII characters before "
    "the @ needs"
)
# QUIT is a courtesy at shutdown; a server that does not answer quickly is just closed.
QUIT_TIMEOUT_SECONDS = 2.0
# A configuration problem (bad credentials, TLS that cannot be set up) is logged at ERROR
# the first time and then at most this often, so a broken deployment is loud but not a flood.
CONFIG_ALERT_REPEAT_SECONDS = 300.0
NULL_PROVIDER_ID = "null"


@dataclass(frozen=True, slots=True)
class SendResult:
    """How one send ended, and the evidence for it."""

    outcome: SendOutcome
    # The SMTP reply code that decided the outcome, when the server replied.
    code: int | None
    # The server's reply text (or, when it never replied, what went wrong), as
    # smtp_replies.kept_text keeps it: one line, escaped, redacted, bounded.
    reply: str | None
    # For "sent": the server's reply after the body (e.g. "2.0.0 Ok: queued as ABC123"),
    # redacted; the provider's handle for this message.
    provider_message_id: str | None
    # Whether the DATA phase was entered; after that a lost connection is an unknown outcome.
    body_sent: bool
    # Seconds spent in send(), including the wait for a free connection.
    duration: float
    # For "permanent": whose problem it is (see Refusal).
    refusal: Refusal | None = None
    # For "throttled": the provider's daily quota is spent, not only its rate.
    quota_spent: bool = False


class Transport(Protocol):
    """Sends one message at a time per call; safe to call concurrently."""

    @property
    def span_attributes(self) -> dict[str, str | int]:
        """What a send span should say about where the mail goes."""
        ...

    @property
    def capacity(self) -> int | None:
        """How many sends can be under way at once (None: no limit); sends beyond it wait."""
        ...

    async def send(self, message: OutgoingMessage, gate: Gate) -> SendResult:
        """Deliver `message`, asking `gate` before the envelope and before the body.

        Never raises, except for cancellation.
        """
        ...

    async def aclose(self) -> None:
        """Release every connection; no send may be started afterwards."""
        ...


def transport_from_settings(kind: TransportKind, settings: SmtpSettings) -> Transport:
    """The transport NOTIFIER_TRANSPORT names."""
    if kind == "smtp":
        return SmtpTransport(settings)
    if kind == "null":
        return NullTransport()
    assert_never(kind)


class NullTransport:
    """Accepts every message at once without any I/O; for benchmarks. Holds no resources."""

    @property
    def span_attributes(self) -> dict[str, str | int]:
        return {"notifier.transport": "null"}

    @property
    def capacity(self) -> int | None:
        return None

    async def send(self, message: OutgoingMessage, gate: Gate) -> SendResult:
        started = time.perf_counter()
        if not await _may_begin(gate) or not _may_send_body(gate):
            return _result("aborted", started)
        return _result(
            "sent",
            started,
            code=250,
            reply=NULL_PROVIDER_ID,
            provider_message_id=NULL_PROVIDER_ID,
            body_sent=True,
        )

    async def aclose(self) -> None:
        return None


class _StaleConnection(Exception):
    """A pooled connection turned out to have been dropped by the server while idle."""


class SmtpTransport:
    """Sends over up to `settings.pool_size` reused SMTP connections, one send per connection.

    Connections open lazily on first need, return to the pool after a clean transaction,
    and are discarded after any connection-level error, a 421, or a cancelled send (whose
    protocol state is unknown). Sends beyond the pool size wait for a free connection.
    `aclose()` QUITs the pooled connections; sends after it fail as transient.
    """

    def __init__(self, settings: SmtpSettings) -> None:
        self._settings = settings
        # Each permit is one connection's worth of sending: a send holds one from before it
        # takes (or opens) a connection until that connection is pooled or closed again, so
        # there are never more connections than permits.
        # fast_acquire: a free connection is taken without a trip around the event loop.
        self._slots = anyio.Semaphore(settings.pool_size, fast_acquire=True)
        # Connected clients between transactions; the most recently used is reused first,
        # as it is the least likely to have been dropped for idling.
        self._idle: list[Session] = []
        self._local_hostname: str | None = None
        self._alerted_at: dict[str, float] = {}
        self._closed = False

    @property
    def span_attributes(self) -> dict[str, str | int]:
        return {
            "server.address": self._settings.host,
            "server.port": self._settings.port,
            "network.protocol.name": "smtp",
        }

    @property
    def capacity(self) -> int | None:
        return self._settings.pool_size

    async def send(self, message: OutgoingMessage, gate: Gate) -> SendResult:
        started = time.perf_counter()
        if self._closed:
            return _result("transient", started, reply="the SMTP transport is closed")
        try:
            wire, utf8 = _serialize(message)
        except (ValueError, TypeError) as exc:
            # A value that cannot go into a message fails the same way on every attempt.
            return _result(
                "permanent",
                started,
                reply=f"the message cannot be built: {exc}",
                refusal="message",
            )
        except Exception as exc:
            log.error("unexpected error while building a message", exc_info=exc)
            return _result("transient", started, reply=f"the message cannot be built: {exc}")
        async with self._slots:
            if not await _may_begin(gate):
                return _result("aborted", started)
            session = self._take_idle()
            if session is not None:
                try:
                    return await self._transact(session, message, wire, utf8, gate, started)
                except _StaleConnection:
                    # Not this message's fault: the server dropped the connection while it
                    # sat in the pool. One fresh connection gets the send instead.
                    pass
            return await self._transact(None, message, wire, utf8, gate, started)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        timeout = min(QUIT_TIMEOUT_SECONDS, self._settings.command_timeout)
        try:
            for session in idle:
                # A server that has gone already needs no goodbye.
                await quit_session(session, timeout)
        finally:
            for session in idle:
                session.close()

    def _take_idle(self) -> Session | None:
        while self._idle:
            session = self._idle.pop()
            if session.is_connected:
                return session
            # The server closed it while idle and we saw the EOF: nothing to retry.
            session.close()
        return None

    async def _transact(
        self,
        session: Session | None,
        message: OutgoingMessage,
        wire: bytes,
        utf8: bool,
        gate: Gate,
        started: float,
    ) -> SendResult:
        """One SMTP transaction; raises _StaleConnection only for a reused `session`."""
        s = self._settings
        reused = session is not None
        progress = Progress(phase="connect")
        keep = False
        try:
            if session is None:
                session = await self._connect()
            progress.phase = "mail"
            if utf8 and not session.supports("smtputf8"):
                keep = True
                return _result("permanent", started, reply=NO_SMTPUTF8, refusal="message")
            envelope = _envelope(session, message, len(wire), utf8)
            try:
                response = await transact(
                    session,
                    envelope,
                    wire,
                    lambda: _may_send_body(gate),
                    progress,
                    command_timeout=s.command_timeout,
                    data_timeout=s.data_timeout,
                )
            except SMTPServerDisconnected as exc:
                if reused and progress.phase == "mail":
                    # The MAIL reply never came on a pooled connection: dropped while idle.
                    raise _StaleConnection from exc
                raise
            if response is None:
                # Nothing was sent; the session was reset (or closed, if it could not be).
                keep = session.is_connected
                return _result("aborted", started)
            keep = True
            queued = kept_text(response.message)
            return _result(
                "sent",
                started,
                code=response.code,
                reply=queued,
                provider_message_id=queued,
                body_sent=True,
            )
        except _StaleConnection:
            raise
        except Exception as exc:
            result = self._classify(exc, progress, started)
            if session is not None and leaves_connection_usable(exc) and session.is_connected:
                keep = await reset(session, s.command_timeout)
            return result
        finally:
            # Also reached on cancellation, with keep False: a connection interrupted at an
            # unknown point of the protocol must never serve another send.
            if session is not None:
                if keep and session.is_connected and not self._closed:
                    self._idle.append(session)
                else:
                    session.close()

    async def _connect(self) -> Session:
        """A new connection, greeted (and secured and authenticated as configured), its
        transactions handed to a Session."""
        client = self._new_client()
        try:
            if self._local_hostname is None:
                # aiosmtplib would look this up (a possibly slow DNS query) for every new
                # connection; it is the same for all of them.
                self._local_hostname = await anyio.to_thread.run_sync(socket.getfqdn)
                client.local_hostname = self._local_hostname
            await client.connect()
            if client.is_ehlo_or_helo_needed:
                # Done here so that a failing greeting counts as connecting, not as the
                # message.
                try:
                    await client.ehlo()
                except SMTPHeloError:
                    await client.helo()
            return Session.take_over(client)
        except BaseException:
            client.close()
            raise

    def _new_client(self) -> SMTP:
        s = self._settings
        return SMTP(
            hostname=s.host,
            port=s.port,
            username=s.username,
            password=s.password,
            local_hostname=self._local_hostname,
            # The client-wide timeout covers connect, EHLO, STARTTLS and AUTH; every later
            # command passes its own.
            timeout=s.connect_timeout,
            use_tls=s.tls == "tls",
            start_tls=s.tls == "starttls",
            validate_certs=s.validate_certs,
            cert_bundle=str(s.ca_file) if s.ca_file is not None else None,
        )

    def _classify(self, exc: Exception, progress: Progress, started: float) -> SendResult:
        verdict = verdict_of(exc, progress.phase, body_sent=progress.body_sent)
        if verdict.alert is not None:
            self._alert(verdict.alert, exc)
        return _result(
            verdict.outcome,
            started,
            code=verdict.code,
            reply=verdict.reply,
            body_sent=progress.body_sent,
            refusal=verdict.refusal,
            quota_spent=verdict.quota_spent,
        )

    def _alert(self, problem: str, exc: Exception) -> None:
        now = time.monotonic()
        last = self._alerted_at.get(problem)
        if last is not None and now - last < CONFIG_ALERT_REPEAT_SECONDS:
            return
        self._alerted_at[problem] = now
        log.error(
            "SMTP configuration problem: %s (%s). Check the NOTIFIER_SMTP_* and "
            "NOTIFIER_MAIL_FROM settings and the relay's policy for this sender.",
            problem,
            redact_text(describe(exc)),
        )


def _serialize(message: OutgoingMessage) -> tuple[bytes, bool]:
    """The message in wire form, and whether its addresses need SMTPUTF8."""
    utf8 = not (message.sender.isascii() and message.recipient.isascii())
    return message.to_wire(), utf8


def _envelope(session: Session, message: OutgoingMessage, size: int, utf8: bool) -> Envelope:
    """The transaction's MAIL and RCPT lines, with the options this server understands."""
    dsn = message.envelope_id is not None and session.supports("dsn")
    mail_options = _mail_options(session, size, utf8)
    if dsn:
        # Failure reports only, with the headers alone, naming the delivery.
        mail_options += ["RET=HDRS", f"ENVID={message.envelope_id}"]
    return Envelope.build(
        message.return_path or message.sender,
        message.recipient,
        mail_options=mail_options,
        rcpt_options=["NOTIFY=FAILURE"] if dsn else [],
        utf8=utf8,
    )


def _mail_options(session: Session, size: int, utf8: bool) -> list[str]:
    options = []
    if session.supports("size"):
        # Lets a server refuse an oversized message before we send it.
        options.append(f"SIZE={size}")
    if utf8:
        options.append("SMTPUTF8")
        if session.supports("8bitmime"):
            options.append("BODY=8BITMIME")
    return options


# A gate that cannot answer (say, the database is unreachable) cannot vouch for the lease;
# not sending is the only safe reading of its exception.


async def _may_begin(gate: Gate) -> bool:
    try:
        return bool(await gate.may_begin())
    except Exception:
        log.warning("the send gate failed before the envelope; not sending", exc_info=True)
        return False


def _may_send_body(gate: Gate) -> bool:
    try:
        return bool(gate.may_send_body())
    except Exception:
        log.warning("the send gate failed before the body; not sending", exc_info=True)
        return False


def _result(
    outcome: SendOutcome,
    started: float,
    *,
    code: int | None = None,
    reply: str | None = None,
    provider_message_id: str | None = None,
    body_sent: bool = False,
    refusal: Refusal | None = None,
    quota_spent: bool = False,
) -> SendResult:
    return SendResult(
        outcome=outcome,
        code=code,
        reply=None if reply is None else kept_text(reply),
        provider_message_id=provider_message_id,
        body_sent=body_sent,
        duration=time.perf_counter() - started,
        refusal=refusal,
        quota_spent=quota_spent,
    )
