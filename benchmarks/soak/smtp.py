"""The soak's mail server: real aiosmtpd listeners that misbehave on purpose and log everything.

One listener per worker slot, each on its own loopback port, so every transaction in the log
names the slot (and so the worker process) that opened it. Faults are dealt per transaction
at RCPT TO; the log keeps every transaction: when it began, which fault it drew, the body
and Message-ID it carried, what the server answered and when, and whether the server kept
the message (took responsibility for it).

tests/support/smtp_server.py is the test suite's server; the soak needs a log that it does
not keep (RCPT replies, per-listener attribution, reply times), so it has its own, built the
same way.
"""

from __future__ import annotations

import asyncio
import enum
import random
import socket
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

HOST = "127.0.0.1"
# What the server calls itself; naming it spares aiosmtpd a getfqdn() per connection.
SERVER_NAME = "smtp.soak"
# Seconds a listener may take to come up.
READY_TIMEOUT_SECONDS = 10.0

# Faults are dealt from a deck of this many transactions (see MailLog.draw).
DECK_SIZE = 100

REPLY_RCPT_OK = "250 2.1.5 Ok"
REPLY_4XX = "451 4.3.0 try again later"
REPLY_DATA_5XX = "554 5.6.0 message content rejected"


class Fault(enum.StrEnum):
    """What one transaction gets; drawn at RCPT TO."""

    ACCEPT = "accept"
    RCPT_4XX = "rcpt_4xx"  # 451 at RCPT TO: the body never comes
    RCPT_5XX = "rcpt_5xx"  # 550 at RCPT TO
    DATA_4XX = "data_4xx"  # 451 after the body, not kept
    DATA_5XX = "data_5xx"  # 554 after the body, not kept
    DROP_AFTER_DATA = "drop_after_data"  # kept, then the connection closes without a reply
    SLOW_REPLY = "slow_reply"  # kept, then 250 after the slow-reply delay


@dataclass(slots=True)
class Transaction:
    """One SMTP transaction (one RCPT TO), as the server saw it. Times are time.time()."""

    slot: int
    peer: str
    recipient: str
    fault: Fault
    rcpt_at: float
    rcpt_reply: str
    message_id: str | None = None
    content: bytes | None = None
    body_at: float | None = None  # when the whole body had arrived
    reply: str | None = None  # after the body; "" when the server hung up instead
    replied_at: float | None = None
    kept: bool = False
    client_gone: bool = False  # the client went away before the server answered
    extra: dict[str, Any] = field(default_factory=dict)

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


class MailLog:
    """Every transaction of every listener, and the switch and odds of the faults."""

    def __init__(self, rates: dict[Fault, float], seed: int, slow_reply_seconds: float) -> None:
        if any(not 0 <= r <= 1 for r in rates.values()) or sum(rates.values()) > 1:
            raise ValueError("fault rates must be probabilities that add up to at most 1")
        self.rates = dict(rates)
        self.slow_reply_seconds = slow_reply_seconds
        self._random = random.Random(seed)
        self._deck: list[Fault] = []
        self._lock = threading.Lock()
        self._transactions: list[Transaction] = []
        self._faults_on = False

    def set_faults(self, on: bool) -> None:
        with self._lock:
            self._faults_on = on

    @property
    def transactions(self) -> list[Transaction]:
        with self._lock:
            return list(self._transactions)

    def draw(self) -> Fault:
        """The next transaction's fault. Drawn from a shuffled deck of DECK_SIZE cards holding
        each fault in proportion to its rate, so every hundred transactions get exactly the
        planned mix (a short run still sees every kind) in an order the seed decides."""
        with self._lock:
            if not self._faults_on:
                return Fault.ACCEPT
            if not self._deck:
                for fault, rate in self.rates.items():
                    self._deck += [fault] * round(rate * DECK_SIZE)
                self._deck += [Fault.ACCEPT] * max(0, DECK_SIZE - len(self._deck))
                self._random.shuffle(self._deck)
            return self._deck.pop()

    def add(self, transaction: Transaction) -> None:
        with self._lock:
            self._transactions.append(transaction)


class _Handler:
    """aiosmtpd hooks for one listener (slot); they run in that listener's thread."""

    def __init__(self, log: MailLog, slot: int) -> None:
        self.log = log
        self.slot = slot
        # The transaction each open envelope belongs to; aiosmtpd replaces the envelope
        # after DATA and on RSET, so a stale entry never applies to a later transaction.
        self.open: weakref.WeakKeyDictionary[Envelope, Transaction] = weakref.WeakKeyDictionary()

    async def handle_RCPT(
        self, smtp: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        fault = self.log.draw()
        reply = {
            Fault.RCPT_4XX: REPLY_4XX,
            Fault.RCPT_5XX: f"550 5.1.1 <{address}>: user unknown",
        }.get(fault, REPLY_RCPT_OK)
        peer = session.peer
        transaction = Transaction(
            slot=self.slot,
            peer=f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer),
            recipient=address,
            fault=fault,
            rcpt_at=time.time(),
            rcpt_reply=reply,
        )
        self.log.add(transaction)
        if reply == REPLY_RCPT_OK:
            self.open[envelope] = transaction
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(options)
        return reply

    async def handle_DATA(self, smtp: SMTP, session: Session, envelope: Envelope) -> str:
        content: bytes = envelope.original_content or b""
        transaction = self.open.pop(envelope, None)
        if transaction is None:  # DATA without an accepted RCPT cannot happen; log it anyway
            transaction = Transaction(self.slot, "", "", Fault.ACCEPT, time.time(), "")
            self.log.add(transaction)
        transaction.content = content
        transaction.message_id = _message_id(content)
        transaction.body_at = time.time()
        fault = transaction.fault
        if fault is Fault.DATA_4XX:
            return self._answer(transaction, REPLY_4XX, kept=False)
        if fault is Fault.DATA_5XX:
            return self._answer(transaction, REPLY_DATA_5XX, kept=False)
        transaction.kept = True
        if fault is Fault.DROP_AFTER_DATA:
            transaction.reply = ""
            transaction.replied_at = time.time()
            await _hang_up(smtp)
        if fault is Fault.SLOW_REPLY:
            try:
                await asyncio.sleep(self.log.slow_reply_seconds)
            except asyncio.CancelledError:
                transaction.client_gone = True
                raise
        accepted = f"250 2.0.0 Ok: queued as {uuid.uuid4().hex[:12].upper()}"
        if smtp.transport is None or smtp.transport.is_closing():
            transaction.client_gone = True
        return self._answer(transaction, accepted, kept=True)

    @staticmethod
    def _answer(transaction: Transaction, reply: str, *, kept: bool) -> str:
        transaction.reply = reply
        transaction.replied_at = time.time()
        transaction.kept = kept
        return reply


class FaultySmtp:
    """Listeners on 127.0.0.1, one per worker slot, from start() until stop()."""

    def __init__(self, slots: int, log: MailLog) -> None:
        self.log = log
        self.ports = [_free_port() for _ in range(slots)]
        self._controllers: list[Controller] = []

    def start(self) -> None:
        for slot, port in enumerate(self.ports):
            controller = Controller(
                _Handler(self.log, slot),
                hostname=HOST,
                port=port,
                server_hostname=SERVER_NAME,
                ready_timeout=READY_TIMEOUT_SECONDS,
            )
            controller.start()
            self._controllers.append(controller)

    def stop(self) -> None:
        controllers, self._controllers = self._controllers, []
        for controller in controllers:
            controller.stop()


async def _hang_up(smtp: SMTP) -> None:
    """Close the connection without a reply, and never return: aiosmtpd cancels the
    session task when it sees the connection go (a reply would go to a closed transport)."""
    if smtp.transport is not None:
        smtp.transport.close()
    await asyncio.get_running_loop().create_future()


def _message_id(content: bytes) -> str:
    headers = BytesHeaderParser().parsebytes(content)
    return str(headers.get("Message-ID", "")).strip()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port
