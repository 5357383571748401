"""The SMTP ceiling: a bare aiosmtplib loop pushing one ready-made message into a sink.

`python -m benchmarks.smtp_loop --port N --connections C --seconds S` opens C connections,
prints "ready", waits for a "go" line on stdin (so several processes start together), sends
the same verification email (composed once with notifier's templates) over every connection
as fast as the sink takes it for S seconds, and prints "sent COUNT SECONDS".
"""

from __future__ import annotations

import argparse
import asyncio
import email.policy
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

from aiosmtplib import SMTP

from notifier.delivery.messages import Templates

HOST = "127.0.0.1"
SENDER = "notifier@bench.example.com"
RECIPIENT = "someone@example.com"


def sample_message() -> bytes:
    """A verification email exactly as notifier composes and serialises one."""
    now = datetime.now(UTC)
    message = Templates.load(None).compose(
        message_id=f"<verify.{uuid.uuid4()}@bench.example.com>",
        sender=SENDER,
        recipient=RECIPIENT,
        link="http://127.0.0.1:8000/verify?token=00000000.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
        expires_at=now + timedelta(hours=1),
        purpose="signup",
        now=now,
    )
    return message.to_email().as_bytes(policy=email.policy.SMTP)


async def _send_loop(client: SMTP, payload: bytes, deadline: float, sent: list[int]) -> None:
    while time.perf_counter() < deadline:
        await client.sendmail(SENDER, [RECIPIENT], payload)
        sent[0] += 1


async def run(port: int, connections: int, seconds: float) -> None:
    payload = sample_message()
    clients = [
        SMTP(hostname=HOST, port=port, local_hostname="bench.local") for _ in range(connections)
    ]
    for client in clients:
        await client.connect()
        await client.ehlo()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    sent = [0]
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(*(_send_loop(c, payload, deadline, sent) for c in clients))
    elapsed = time.perf_counter() - started
    print(f"sent {sent[0]} {elapsed:.6f}", flush=True)
    for client in clients:
        await client.quit()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A bare aiosmtplib send loop.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    asyncio.run(run(args.port, args.connections, args.seconds))


if __name__ == "__main__":
    main()
