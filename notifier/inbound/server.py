"""`notifier inbound`: an SMTP listener for the bounce domain that takes reports mailed back
to deliveries' return paths and applies them.

Hostile input by default: only mail to a valid VERP address (notifier.verp: its MAC proves
notifier made it) is accepted, one recipient per message, refused at RCPT otherwise, so a
forged report never reaches the parser; messages are bounded in size, a connection in the
messages it may send, and the listener in its connections and in reports a second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiosmtpd.smtp import SMTP

from notifier import verp
from notifier.config import InboundSettings
from notifier.inbound.parsing import reports_in
from notifier.reports import ours_to_fix
from notifier.storage import reports
from notifier.storage.connection import Pool
from notifier.tokens import TokenKeys

log = logging.getLogger(__name__)

# Messages one connection may send before it is asked to come back.
MESSAGES_PER_CONNECTION = 100


class ReportIntake:
    """The aiosmtpd handler: RCPT proves the return path, DATA applies what it reports."""

    def __init__(
        self,
        pool: Pool,
        keys: TokenKeys,
        domain: str,
        *,
        suppression_seconds: float,
        rate: float,
    ) -> None:
        self.pool = pool
        self.keys = keys
        self.domain = domain
        self.suppression_seconds = suppression_seconds
        self.rate = rate
        self._allowance = rate
        self._counted_at = time.monotonic()
        self.applied: dict[str, int] = {}

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        if envelope.rcpt_tos:
            return "452 4.5.3 one report, one recipient"
        if verp.outbox_of(self.keys, address, self.domain) is None:
            return "550 5.1.1 not a return path of this service"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if not self._take():
            return "451 4.7.1 too many reports; try again later"
        outbox_id = verp.outbox_of(self.keys, envelope.rcpt_tos[0], self.domain)
        if outbox_id is None:  # RCPT proved it; a defence if aiosmtpd ever did not ask
            return "550 5.1.1 not a return path of this service"
        for report in reports_in(envelope.original_content, outbox_id):
            done = await reports.apply(self.pool, report, self.suppression_seconds)
            self.applied[done] = self.applied.get(done, 0) + 1
            log.info(
                "report on delivery %d: %s %s %s: %s",
                outbox_id,
                report.kind,
                report.bounce_type or "",
                report.status or "",
                done,
            )
            if done == "bounced" and ours_to_fix(report.status):
                log.error(
                    "delivery %d bounced for a policy or content reason (%s %s): the "
                    "recipient is not suppressed; check the sender's standing and the content",
                    outbox_id,
                    report.status,
                    report.diagnostic or "",
                )
        return "250 2.0.0 report kept"

    def _take(self) -> bool:
        """One report out of the listener's allowance (`rate` a second, a second's burst)."""
        now = time.monotonic()
        self._allowance = min(self.rate, self._allowance + (now - self._counted_at) * self.rate)
        self._counted_at = now
        if self._allowance < 1:
            return False
        self._allowance -= 1
        return True


class _Session(SMTP):
    """One connection, counted against the listener's limit."""

    def __init__(self, handler: ReportIntake, listener: InboundListener, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._listener = listener

    def connection_made(self, transport: Any) -> None:
        if self._listener.open_connections >= self._listener.max_connections:
            transport.write(b"421 4.7.0 too many connections; try again later\r\n")
            transport.close()
            return
        self._listener.open_connections += 1
        self._counted = True
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if not getattr(self, "_counted", False):
            return  # refused in connection_made: no session was ever set up
        self._listener.open_connections -= 1
        self._counted = False
        super().connection_lost(exc)


class InboundListener:
    """The listener: started on (host, port), stopped when told."""

    def __init__(self, handler: ReportIntake, *, max_bytes: int, max_connections: int) -> None:
        self.handler = handler
        self.max_bytes = max_bytes
        self.max_connections = max_connections
        self.open_connections = 0
        self.port: int | None = None
        self._server: asyncio.AbstractServer | None = None

    @classmethod
    def over(
        cls,
        pool: Pool,
        keys: TokenKeys,
        bounce_domain: str,
        suppression_seconds: float,
        settings: InboundSettings,
    ) -> InboundListener:
        """The listener `notifier inbound` and `notifier dev` run: reports for
        `bounce_domain`'s return paths applied through `pool`, within `settings`' limits."""
        intake = ReportIntake(
            pool, keys, bounce_domain, suppression_seconds=suppression_seconds, rate=settings.rate
        )
        return cls(intake, max_bytes=settings.max_bytes, max_connections=settings.max_connections)

    async def start(self, host: str, port: int) -> int:
        def session() -> SMTP:
            return _Session(
                self.handler,
                self,
                hostname=f"notifier-inbound.{self.handler.domain}",
                data_size_limit=self.max_bytes,
                command_call_limit={"RCPT": 10, "DATA": MESSAGES_PER_CONNECTION, "*": 1000},
            )

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(session, host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
