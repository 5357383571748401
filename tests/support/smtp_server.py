"""A real SMTP server for tests and the soak (aiosmtpd in its own thread): records every
transaction and message it sees, and injects faults planned per recipient or dealt at random."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import random
import ssl
import threading
import time
import uuid
import weakref
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from typing import Any, Literal

import anyio
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from notifier.config import SmtpSettings, TlsMode
from tests.support.ports import free_port

HOST = "127.0.0.1"
# What the server calls itself; naming it spares aiosmtpd a getfqdn() per connection.
SERVER_NAME = "smtp.test"
# Seconds a SLOW_REPLY fault holds its reply unless a SlowData says otherwise.
DEFAULT_SLOW_REPLY_SECONDS = 1.0
# Seconds wait_for waits unless told otherwise.
DEFAULT_WAIT_SECONDS = 5.0
# Seconds a listener may take to come up (the soak starts several on a busy machine).
READY_TIMEOUT_SECONDS = 10.0
# Random faults are dealt from a shuffled deck of this many transactions.
DECK_SIZE = 100

REPLY_RCPT_OK = "250 2.1.5 Ok"
REPLY_4XX = "451 4.3.0 try again later"
REPLY_DATA_5XX = "554 5.6.0 message content rejected"


class Fault(enum.StrEnum):
    """What the server does with one delivery attempt."""

    ACCEPT = "accept"
    # At RCPT TO:
    RCPT_4XX = "rcpt_4xx"  # 451 4.3.0 try again later
    RCPT_5XX = "rcpt_5xx"  # 550 5.1.1 <address>: user unknown
    # After the body (which the server reads in full first):
    DATA_4XX = "data_4xx"  # 451, not kept
    DATA_5XX = "data_5xx"  # 554, not kept
    SLOW_REPLY = "slow_reply"  # kept, then 250 after the server's slow_reply_seconds
    DROP_AFTER_DATA = "drop_after_data"  # kept, then the connection closes with no reply
    # At MAIL FROM, before the recipient is known; planned with SmtpServer.plan_mail:
    DROP_AT_MAIL = "drop_at_mail"  # the connection closes with no reply


@dataclass(frozen=True, slots=True)
class SlowData:
    """Fault.SLOW_REPLY with its own delay: keep the message, answer 250 after `seconds`."""

    seconds: float


class HoldAtRcpt:
    """Pause one attempt at RCPT TO until the test releases it, then accept the recipient.

    Lets a test change the database between a worker's claim and its DATA, deterministically:
    wait for `reached`, change what it needs, set `release`.
    """

    # Seconds the server waits for a release before accepting anyway, so a failing test
    # cannot hang the server thread forever.
    MAX_HOLD_SECONDS = 30.0

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    async def wait_reached(self) -> None:
        if not await anyio.to_thread.run_sync(self.reached.wait, self.MAX_HOLD_SECONDS):
            raise TimeoutError("no delivery attempt reached RCPT TO")


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer one attempt with `line` at MAIL FROM, RCPT TO, or after the body (DATA; the
    message is then not kept): e.g. Reply("rcpt", "550 5.7.1 rejected by policy")."""

    at: Literal["mail", "rcpt", "data"]
    line: str


Planned = Fault | SlowData | HoldAtRcpt | Reply
# What set_random_faults can deal at RCPT TO.
Dealt = Fault | SlowData | Reply

_MAIL_FAULTS = frozenset({Fault.ACCEPT, Fault.DROP_AT_MAIL})


@dataclass(frozen=True, slots=True)
class Received:
    """One message body the server read, whether it kept it or refused it."""

    message_id: str
    sender: str
    recipients: list[str]
    content: bytes
    received_at: float  # time.time()
    reply: str  # "" when the connection was dropped instead of answering
    kept: bool  # the server took responsibility for it (accepted, slow, or dropped after)


@dataclass(slots=True)
class Transaction:
    """One delivery attempt (one RCPT TO) from the recipient to the server's last word.

    Times are time.time(). `listener` is the index of the port it came in on, so a caller
    that gives each client its own port knows which client sent it (the soak: one per
    worker slot).
    """

    listener: int
    recipient: str
    fault: Planned  # what the server did with it (a HoldAtRcpt, once released, is ACCEPT)
    rcpt_at: float
    rcpt_reply: str
    message_id: str | None = None
    content: bytes | None = None
    body_at: float | None = None  # when the whole body had arrived
    reply: str | None = None  # after the body; "" when the server hung up instead
    replied_at: float | None = None
    kept: bool = False
    client_gone: bool = False  # the client went away before the server answered

    @property
    def reply_code(self) -> int | None:
        """The code the transaction ended with: the DATA reply, else the RCPT reply."""
        text = self.reply if self.body_at is not None else self.rcpt_reply
        if not text or self.client_gone:
            return None
        head = text[:3]
        return int(head) if head.isdigit() else None

    @property
    def ended_at(self) -> float:
        return self.replied_at or self.body_at or self.rcpt_at


class SmtpServer:
    """An aiosmtpd server on 127.0.0.1 running in its own thread, from start() until stop().

    Records every delivery attempt in `transactions` and every message body it reads in
    `received`, and counts the client connections it serves. Faults are injected per
    recipient with `plan`, at MAIL FROM with `plan_mail`, or at random with
    `set_random_faults`; anything unplanned is accepted. With `listeners` > 1 it listens on
    that many ports (`ports`), one server behind them all. All state is guarded by one
    lock, since the server threads write what tests read.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        listeners: int = 1,
        slow_reply_seconds: float = DEFAULT_SLOW_REPLY_SECONDS,
        tls: TlsMode = "none",
        certificate: Any = None,
        smtputf8: bool = True,
        pipelining: bool = True,
    ) -> None:
        if port is not None and listeners != 1:
            raise ValueError("a port can be given for a single listener only")
        self.host = HOST
        self.ports = [port] if port is not None else [free_port(HOST) for _ in range(listeners)]
        self.port = self.ports[0]
        self.slow_reply_seconds = slow_reply_seconds
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._transactions: list[Transaction] = []
        self._recipient_faults: defaultdict[str, deque[Planned]] = defaultdict(deque)
        self._mail_faults: deque[Planned] = deque()
        self._random_rates: dict[Dealt, float] = {}
        self._random = random.Random(0)
        self._deck: list[Dealt] = []
        # The transactions each open envelope accepted at RCPT TO (only the server threads
        # touch it). Envelopes are replaced after DATA and on RSET, so a stale entry can
        # never apply to a later transaction.
        self._open: weakref.WeakKeyDictionary[Envelope, list[Transaction]] = (
            weakref.WeakKeyDictionary()
        )
        self._greeted: set[Session] = set()
        self._connections_opened = 0
        self._peak_open = 0
        self._wakers: list[tuple[asyncio.AbstractEventLoop, anyio.Event]] = []
        # Made by start(): aiosmtpd's controller creates its event loop when constructed,
        # and only stop() closes it, so a server that never starts must not have one.
        self._controllers: list[_Controller] = []
        # A trustme.LeafCert for "starttls" (required upgrade) or "tls" (implicit TLS).
        self.tls = tls
        self.certificate = certificate
        # Whether EHLO offers SMTPUTF8 (a relay that does not is common).
        self.smtputf8 = smtputf8
        # Whether EHLO offers PIPELINING (RFC 2920), as Postfix, Exim and SES do; aiosmtpd
        # reads pipelined commands in order either way.
        self.pipelining = pipelining

    # Lifecycle

    def start(self) -> None:
        if self._controllers:
            raise RuntimeError("the SMTP server is already running")
        tls: dict[str, Any] = {}
        if self.tls != "none":
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.certificate.configure_cert(context)
            if self.tls == "tls":
                tls["ssl_context"] = context
            else:
                tls.update(tls_context=context, require_starttls=True)
        for listener, port in enumerate(self.ports):
            controller = _Controller(
                self,
                _Handler(self, listener),
                hostname=HOST,
                port=port,
                enable_SMTPUTF8=self.smtputf8,
                ready_timeout=READY_TIMEOUT_SECONDS,
                **tls,
            )
            try:
                controller.start()
            except BaseException:
                # e.g. the port is taken: the thread has ended, but its loop is still open.
                controller.stop(no_assert=True)
                if not controller.loop.is_closed():
                    controller.loop.close()
                self.stop()
                raise
            self._controllers.append(controller)

    def stop(self) -> None:
        controllers, self._controllers = self._controllers, []
        for controller in controllers:
            controller.stop()

    def __enter__(self) -> SmtpServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def settings(self, **overrides: Any) -> SmtpSettings:
        """SmtpSettings pointing at this server: plain SMTP, and timeouts short enough for
        tests (a fault must not cost a test more than a couple of seconds)."""
        base = SmtpSettings(
            host=self.host,
            port=self.port,
            tls=self.tls,
            connect_timeout=2.0,
            command_timeout=2.0,
            data_timeout=2.0,
            pool_size=8,  # as many as the test workers' sends in flight
            mail_from="notifier@example.com",
            message_id_domain="example.com",
        )
        return dataclasses.replace(base, **overrides)

    # Fault injection

    def plan(self, recipient: str, *faults: Planned) -> None:
        """Each later delivery attempt to `recipient` (counted at RCPT TO) takes the next
        of `faults`; once they are used up, the recipient is accepted again."""
        if Fault.DROP_AT_MAIL in faults or any(
            isinstance(f, Reply) and f.at == "mail" for f in faults
        ):
            raise ValueError("MAIL FROM happens before any recipient is named: use plan_mail")
        with self._lock:
            self._recipient_faults[recipient].extend(faults)

    def plan_mail(self, *faults: Planned) -> None:
        """Each later MAIL FROM, on any connection, takes the next of `faults` (ACCEPT,
        DROP_AT_MAIL, or a Reply at "mail")."""
        if not all(f in _MAIL_FAULTS or (isinstance(f, Reply) and f.at == "mail") for f in faults):
            raise ValueError("only ACCEPT, DROP_AT_MAIL and Reply('mail', ...) happen at MAIL FROM")
        with self._lock:
            self._mail_faults.extend(faults)

    def set_random_faults(self, rates: Mapping[Dealt, float], seed: int) -> None:
        """Deal faults at RCPT TO to every attempt with nothing planned; {} turns them off.

        They come from a shuffled deck of DECK_SIZE cards holding each fault in proportion
        to its rate (rounded to whole cards), the rest ACCEPT: every hundred attempts get
        exactly that mix, so a short run still sees every kind, in an order `seed` decides.
        """
        if any(not 0 <= rate <= 1 for rate in rates.values()) or sum(rates.values()) > 1:
            raise ValueError("rates must be probabilities that add up to at most 1")
        if Fault.DROP_AT_MAIL in rates or any(
            isinstance(f, Reply) and f.at == "mail" for f in rates
        ):
            raise ValueError("faults at MAIL FROM are planned with plan_mail")
        with self._lock:
            self._random_rates = dict(rates)
            self._random = random.Random(seed)
            self._deck = []

    # What happened

    @property
    def received(self) -> list[Received]:
        """Every message body read, in order (a snapshot)."""
        with self._lock:
            return list(self._received)

    @property
    def transactions(self) -> list[Transaction]:
        """Every delivery attempt (RCPT TO), in order (a snapshot of the list; a transaction
        still open may change until the server stops)."""
        with self._lock:
            return list(self._transactions)

    @property
    def kept(self) -> list[Received]:
        """The received messages the server kept."""
        return [r for r in self.received if r.kept]

    @property
    def connections_opened(self) -> int:
        """Client connections served so far (counted at EHLO/HELO, which the controller's
        own start-up probe never sends)."""
        with self._lock:
            return self._connections_opened

    @property
    def peak_open_connections(self) -> int:
        """The most client connections that were open at the same time."""
        with self._lock:
            return self._peak_open

    async def wait_for(
        self,
        condition: int | Callable[[list[Received]], bool],
        # A deadline is part of every wait in a test, so it is built in (hence the noqa).
        timeout: float = DEFAULT_WAIT_SECONDS,  # noqa: ASYNC109
    ) -> list[Received]:
        """Wait until `received` holds at least `condition` messages, or satisfies it; return
        that snapshot. Raises TimeoutError after `timeout` seconds."""
        if callable(condition):
            satisfied = condition
        else:
            count = condition

            def satisfied(received: list[Received]) -> bool:
                return len(received) >= count

        # Woken, not polling: each wait registers an event that the server thread sets
        # through this loop's call_soon_threadsafe whenever it records a message. Unlike a
        # threading.Condition waited on in a worker thread, nothing is left blocked in a
        # thread when the wait is cancelled or times out. (asyncio-only, as the tests are.)
        loop = asyncio.get_running_loop()
        with anyio.fail_after(timeout):
            while True:
                changed = anyio.Event()
                waker = (loop, changed)
                with self._lock:
                    snapshot = list(self._received)
                    if satisfied(snapshot):
                        return snapshot
                    # Registered under the same lock as the check, so no wake-up is missed.
                    self._wakers.append(waker)
                try:
                    await changed.wait()
                finally:
                    with self._lock:
                        self._wakers.remove(waker)

    # Called from the server thread

    def _record(self, received: Received) -> None:
        with self._lock:
            self._received.append(received)
            wakers = list(self._wakers)
        for loop, event in wakers:
            # RuntimeError: that test's loop has closed, so nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    def _add(self, transaction: Transaction) -> None:
        with self._lock:
            self._transactions.append(transaction)

    def _greet(self, session: Session) -> None:
        with self._lock:
            if session in self._greeted:
                return
            self._greeted.add(session)
            self._connections_opened += 1
            self._peak_open = max(self._peak_open, len(self._greeted))

    def _closed(self, session: Session | None) -> None:
        if session is not None:
            with self._lock:
                self._greeted.discard(session)

    def _mail_fault(self) -> Planned:
        with self._lock:
            return self._mail_faults.popleft() if self._mail_faults else Fault.ACCEPT

    def _recipient_fault(self, recipient: str) -> Planned:
        with self._lock:
            queue = self._recipient_faults.get(recipient)
            if queue:
                return queue.popleft()
            if not self._random_rates:
                return Fault.ACCEPT
            if not self._deck:
                for fault, rate in self._random_rates.items():
                    self._deck += [fault] * round(rate * DECK_SIZE)
                self._deck += [Fault.ACCEPT] * max(0, DECK_SIZE - len(self._deck))
                self._random.shuffle(self._deck)
            return self._deck.pop()


class _Handler:
    """aiosmtpd hooks of one listener: run in its thread, one session task per connection."""

    def __init__(self, server: SmtpServer, listener: int) -> None:
        self._server = server
        self._listener = listener

    async def handle_EHLO(
        self, smtp: SMTP, session: Session, envelope: Envelope, hostname: str, responses: list[str]
    ) -> list[str]:
        session.host_name = hostname
        self._server._greet(session)
        if self._server.pipelining:
            responses.insert(len(responses) - 1, "250-PIPELINING")
        return responses

    async def handle_HELO(
        self, smtp: SMTP, session: Session, envelope: Envelope, hostname: str
    ) -> str:
        session.host_name = hostname
        self._server._greet(session)
        return f"250 {SERVER_NAME}"

    async def handle_MAIL(
        self, smtp: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        fault = self._server._mail_fault()
        if fault is Fault.DROP_AT_MAIL:
            await _hang_up(smtp)
        if isinstance(fault, Reply):
            return fault.line
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 2.1.0 Ok"

    async def handle_RCPT(
        self, smtp: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        rcpt_at = time.time()
        fault = self._server._recipient_fault(address)
        if isinstance(fault, HoldAtRcpt):
            fault.reached.set()
            await asyncio.get_running_loop().run_in_executor(
                None, fault.release.wait, HoldAtRcpt.MAX_HOLD_SECONDS
            )
            fault = Fault.ACCEPT
        if fault is Fault.RCPT_4XX:
            reply = REPLY_4XX
        elif fault is Fault.RCPT_5XX:
            reply = f"550 5.1.1 <{address}>: user unknown"
        elif isinstance(fault, Reply) and fault.at == "rcpt":
            reply = fault.line
        else:
            reply = REPLY_RCPT_OK
        transaction = Transaction(self._listener, address, fault, rcpt_at, reply)
        self._server._add(transaction)
        if reply == REPLY_RCPT_OK:
            self._server._open.setdefault(envelope, []).append(transaction)
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(options)
        return reply

    async def handle_DATA(self, smtp: SMTP, session: Session, envelope: Envelope) -> str:
        transactions = self._server._open.pop(envelope, [])
        # The first recipient's fault decides what happens to the body.
        fault = next((t.fault for t in transactions if t.fault is not Fault.ACCEPT), Fault.ACCEPT)
        accepted = f"250 2.0.0 Ok: queued as {uuid.uuid4().hex[:12].upper()}"
        if fault is Fault.DATA_4XX:
            reply, kept = REPLY_4XX, False
        elif fault is Fault.DATA_5XX:
            reply, kept = REPLY_DATA_5XX, False
        elif isinstance(fault, Reply):
            reply, kept = fault.line, False
        elif fault is Fault.DROP_AFTER_DATA:
            reply, kept = "", True
        else:
            reply, kept = accepted, True
        content: bytes = envelope.original_content or b""
        message_id, body_at = _message_id(content), time.time()
        for transaction in transactions:
            transaction.content, transaction.message_id = content, message_id
            transaction.body_at, transaction.kept = body_at, kept
        self._server._record(
            Received(
                message_id=message_id,
                sender=envelope.mail_from or "",
                recipients=list(envelope.rcpt_tos),
                content=content,
                received_at=body_at,
                reply=reply,
                kept=kept,
            )
        )
        if reply != accepted:  # refused, or hung up on: the answer is immediate
            _answered(transactions, reply)
        if fault is Fault.DROP_AFTER_DATA:
            await _hang_up(smtp)
        try:
            if isinstance(fault, SlowData):
                await asyncio.sleep(fault.seconds)
            elif fault is Fault.SLOW_REPLY:
                await asyncio.sleep(self._server.slow_reply_seconds)
        except asyncio.CancelledError:
            _answered(transactions, None, client_gone=True)
            raise
        if reply == accepted:
            gone = smtp.transport is None or smtp.transport.is_closing()
            _answered(transactions, reply, client_gone=gone)
        return reply


class _SessionSMTP(SMTP):
    """aiosmtpd's protocol, telling the server when a connection ends."""

    def __init__(self, server: SmtpServer, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._server = server

    def connection_lost(self, error: Exception | None) -> None:
        session = self.session
        super().connection_lost(error)
        self._server._closed(session)


class _Controller(Controller):
    def __init__(self, server: SmtpServer, handler: _Handler, **kwargs: Any) -> None:
        super().__init__(handler, server_hostname=SERVER_NAME, **kwargs)
        self._server = server

    def factory(self) -> SMTP:
        return _SessionSMTP(self._server, self.handler, **self.SMTP_kwargs)


def _answered(
    transactions: list[Transaction], reply: str | None, *, client_gone: bool = False
) -> None:
    """Note the server's last word on each transaction (None: it never got to say it)."""
    for transaction in transactions:
        if reply is not None:
            transaction.reply, transaction.replied_at = reply, time.time()
        transaction.client_gone = client_gone


async def _hang_up(smtp: SMTP) -> None:
    """Close the connection without a reply, and never return.

    The session task is cancelled by aiosmtpd as soon as it sees the connection go, which
    ends this wait; returning a reply instead would have aiosmtpd write to a closed
    transport and die with an exception nobody retrieves.
    """
    if smtp.transport is not None:
        smtp.transport.close()
    await asyncio.get_running_loop().create_future()


def _message_id(content: bytes) -> str:
    headers = BytesHeaderParser().parsebytes(content)
    return str(headers.get("Message-ID", "")).strip()
