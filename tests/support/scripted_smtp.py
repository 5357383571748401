"""A loopback SMTP server that answers from a script and records every read it makes, for
what a full server cannot show: how the client's commands were grouped into writes, and how
it reads several replies that arrive together (the replies to one read go out in one write).

It runs in the test's own event loop; `replies` maps a command's verb (MAIL, RCPT, DATA,
RSET, QUIT) or BODY (the end of a message) to the reply line it gets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from notifier.config import SmtpSettings

HOST = "127.0.0.1"
DEFAULT_REPLIES: Mapping[str, str] = {
    "MAIL": "250 2.1.0 Ok",
    "RCPT": "250 2.1.5 Ok",
    "DATA": "354 End data with <CR><LF>.<CR><LF>",
    "BODY": "250 2.0.0 Ok: queued as SCRIPTED",
    "RSET": "250 2.0.0 Ok",
    "QUIT": "221 2.0.0 Bye",
    "NOOP": "250 2.0.0 Ok",
}


@dataclass
class ScriptedSmtp:
    """The server; `reads` holds every chunk it read, `bodies` every message it took."""

    replies: Mapping[str, str] = field(default_factory=dict)
    pipelining: bool = True
    # Sent once, right after the reply to the first body (a server speaking out of turn).
    unsolicited: str | None = None
    command_timeout: float = 5.0
    port: int = 0
    reads: list[bytes] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    connections: int = 0

    def reply_to(self, verb: str) -> str:
        return self.replies.get(verb, DEFAULT_REPLIES.get(verb, "500 5.5.2 unknown command"))

    def settings(self) -> SmtpSettings:
        return SmtpSettings(
            host=HOST,
            port=self.port,
            connect_timeout=5.0,
            command_timeout=self.command_timeout,
            data_timeout=self.command_timeout,
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        extensions = ["250-scripted.test", "250-SIZE 1000000", "250-8BITMIME"]
        if self.pipelining:
            extensions.append("250-PIPELINING")
        extensions.append("250 SMTPUTF8")
        writer.write(b"220 scripted.test ESMTP\r\n")
        body: bytearray | None = None
        pending = b""
        try:
            while chunk := await reader.read(65536):
                self.reads.append(chunk)
                pending += chunk
                out: list[str] = []
                while pending:
                    if body is not None:
                        end = pending.find(b"\r\n.\r\n")
                        if end < 0:
                            body += pending
                            pending = b""
                            break
                        body += pending[: end + 2]
                        pending = pending[end + 5 :]
                        self.bodies.append(bytes(body))
                        body = None
                        out.append(self.reply_to("BODY"))
                        if self.unsolicited is not None:
                            out.append(self.unsolicited)
                            self.unsolicited = None
                        continue
                    line, sep, rest = pending.partition(b"\r\n")
                    if not sep:
                        break
                    pending = rest
                    verb = line.split(b" ", 1)[0].split(b":", 1)[0].upper().decode()
                    if verb in ("EHLO", "HELO"):
                        out.append("\r\n".join(extensions))
                        continue
                    reply = self.reply_to(verb)
                    out.append(reply)
                    if verb == "DATA" and reply.startswith("354"):
                        body = bytearray()
                out = [line for line in out if line]
                if out:
                    writer.write("".join(f"{line}\r\n" for line in out).encode())
                    if any(line.startswith("221") for line in out):
                        break
        finally:
            writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[ScriptedSmtp]:
        server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield self
        finally:
            server.close()
