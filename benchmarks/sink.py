"""SMTP sinks: a recording one that notes when each message arrived, and postfix's smtp-sink.

The recording sink is a small ESMTP server on asyncio's protocol layer that accepts every
message and, the moment the final "." of DATA arrives, records the message's Message-ID
and the wall clock (the same clock PostgreSQL's now() and the producer read). Run it as
`python -m benchmarks.sink --port N --record FILE`: it prints "ready PORT" once listening
and writes one "MESSAGE-ID TIME_NS" line per message to FILE on SIGTERM.

postfix's `smtp-sink` (Debian package postfix) accepts mail much faster and with far less
CPU, so throughput phases prefer it when it is installed; it records nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

HOST = "127.0.0.1"
SERVER_NAME = b"bench-sink"
# Where postfix's smtp-sink is installed by Debian, if PATH lacks it.
SMTP_SINK_PATHS = ("/usr/sbin/smtp-sink", "/usr/lib/postfix/sbin/smtp-sink")
# smtp-sink's listen backlog.
SMTP_SINK_BACKLOG = 256
# Largest message accepted, bytes (advertised as SIZE).
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
_MESSAGE_ID = re.compile(rb"^message-id:[ \t]*(<[^>\r\n]*>)", re.IGNORECASE | re.MULTILINE)

_GREETING = b"220 " + SERVER_NAME + b" ESMTP bench sink\r\n"
_EHLO = (
    b"250-" + SERVER_NAME + b"\r\n"
    b"250-PIPELINING\r\n"
    b"250-SIZE " + str(MAX_MESSAGE_BYTES).encode() + b"\r\n"
    b"250-8BITMIME\r\n"
    b"250 SMTPUTF8\r\n"
)
_OK = b"250 2.0.0 OK\r\n"
_START_DATA = b"354 End data with <CR><LF>.<CR><LF>\r\n"
_BYE = b"221 2.0.0 Bye\r\n"
_UNKNOWN = b"502 5.5.2 Command not recognized\r\n"


def smtp_sink_path() -> str | None:
    """postfix's smtp-sink, if installed."""
    found = shutil.which("smtp-sink")
    if found:
        return found
    return next((p for p in SMTP_SINK_PATHS if os.access(p, os.X_OK)), None)


class Receipts:
    """What the sink received: (Message-ID, wall-clock ns at the end of DATA)."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, int]] = []
        self.queued = 0

    def write(self, path: Path) -> None:
        with path.open("w", encoding="ascii") as out:
            for message_id, at in self.records:
                out.write(f"{message_id.decode('ascii', 'replace')} {at}\n")


class SinkProtocol(asyncio.Protocol):
    """One SMTP session: commands line by line, then DATA up to the lone dot."""

    def __init__(self, receipts: Receipts) -> None:
        self.receipts = receipts
        self.buffer = bytearray()
        self.in_data = False
        self.scanned = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(_GREETING)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        replies = bytearray()
        while self.transport is not None:
            if self.in_data:
                if not self._end_of_data(replies):
                    break
                continue
            end = self.buffer.find(b"\r\n")
            if end < 0:
                break
            line = bytes(self.buffer[:end])
            del self.buffer[: end + 2]
            if not self._command(line, replies):
                break
        if replies and self.transport is not None:
            self.transport.write(bytes(replies))

    def _end_of_data(self, replies: bytearray) -> bool:
        if self.buffer.startswith(b".\r\n"):
            end, skip = 0, 3
        else:
            found = self.buffer.find(b"\r\n.\r\n", self.scanned)
            if found < 0:
                self.scanned = max(0, len(self.buffer) - 4)
                return False
            end, skip = found + 2, found + 5
        at = time.time_ns()
        head_end = self.buffer.find(b"\r\n\r\n", 0, end)
        head = bytes(self.buffer[: end if head_end < 0 else head_end + 2])
        match = _MESSAGE_ID.search(head)
        self.receipts.records.append((match.group(1) if match else b"-", at))
        self.receipts.queued += 1
        del self.buffer[:skip]
        self.in_data = False
        self.scanned = 0
        replies += b"250 2.0.0 Ok: queued as %d\r\n" % self.receipts.queued
        return True

    def _command(self, line: bytes, replies: bytearray) -> bool:
        verb = line[:4].upper()
        if verb == b"EHLO":
            replies += _EHLO
        elif verb in (b"HELO", b"MAIL", b"RCPT", b"RSET", b"NOOP"):
            replies += _OK
        elif verb == b"DATA":
            replies += _START_DATA
            self.in_data = True
            self.scanned = 0
        elif verb == b"QUIT":
            replies += _BYE
            assert self.transport is not None
            self.transport.write(bytes(replies))
            replies.clear()
            self.transport.close()
            self.transport = None
            return False
        else:
            replies += _UNKNOWN
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(port: int, record: Path | None) -> None:
    loop = asyncio.get_running_loop()
    receipts = Receipts()
    server = await loop.create_server(
        lambda: SinkProtocol(receipts), HOST, port, backlog=1024, reuse_address=True
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    bound = server.sockets[0].getsockname()[1]
    print(f"ready {bound}", flush=True)
    async with server:
        await stop.wait()
    if record is not None:
        receipts.write(record)
    print(f"received {len(receipts.records)}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A recording SMTP sink on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record", type=Path, help="write receipts here at exit")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.port, args.record))
    sys.exit(0)


if __name__ == "__main__":
    main()
