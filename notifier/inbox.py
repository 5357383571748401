"""The dev inbox: an SMTP server that keeps what it receives, and pages that show it.

Only `notifier dev` runs it. Messages are kept in memory, newest first, bounded.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import itertools
import re
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from html import escape
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from notifier.access import access
from notifier.pages import PAGE_HEADERS

# Captured messages kept; older ones are forgotten.
INBOX_CAPACITY = 500
_LINK = re.compile(r"https?://[^\s\"'<>]+/verify\?token=[A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class Captured:
    """One message the dev SMTP server received."""

    number: int
    received_at: datetime
    message_id: str
    sender: str
    recipients: tuple[str, ...]
    subject: str
    text: str
    link: str | None


class Inbox:
    """Holds captured messages and serves SMTP for them from `start()` until `stop()`."""

    def __init__(self, capacity: int = INBOX_CAPACITY) -> None:
        self.messages: deque[Captured] = deque(maxlen=capacity)
        self._numbers = itertools.count(1)
        self._server: asyncio.Server | None = None
        self.port: int | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        from aiosmtpd.smtp import SMTP  # only dev mode needs aiosmtpd (the dev extra)

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: SMTP(self, hostname="notifier-dev-inbox", enable_SMTPUTF8=True), host, port
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        body = parsed.get_body(("plain",))
        text = body.get_content() if body is not None else ""
        link = _LINK.search(text)
        self.messages.appendleft(
            Captured(
                number=next(self._numbers),
                received_at=datetime.now(UTC),
                message_id=str(parsed.get("Message-ID", "")),
                sender=envelope.mail_from,
                recipients=tuple(envelope.rcpt_tos),
                subject=str(parsed.get("Subject", "")),
                text=text,
                link=link.group(0) if link else None,
            )
        )
        return "250 2.0.0 Ok: kept in the dev inbox"

    def find(self, number: int) -> Captured | None:
        return next((m for m in self.messages if m.number == number), None)

    def routes(self, app: FastAPI) -> None:
        """Add /dev/inbox (the list), /dev/inbox/{n} (one message) and /dev/inbox.json."""

        @app.get(
            "/dev/inbox", response_class=HTMLResponse, include_in_schema=False, **access("open")
        )
        async def inbox_page() -> HTMLResponse:
            rows = "".join(
                f"<tr><td>{m.received_at:%H:%M:%S}</td><td>{escape(', '.join(m.recipients))}</td>"
                f'<td><a href="/dev/inbox/{m.number}">{escape(m.subject)}</a></td></tr>'
                for m in self.messages
            )
            empty = "" if self.messages else "<p>No mail yet. Request a verification first.</p>"
            return _page(
                "Dev inbox",
                "<h1>Dev inbox</h1>"
                f"{empty}<table><tr><th>Time</th><th>To</th><th>Subject</th></tr>{rows}</table>",
            )

        @app.get(
            "/dev/inbox/{number}",
            response_class=HTMLResponse,
            include_in_schema=False,
            **access("open"),
        )
        async def message_page(number: int) -> HTMLResponse:
            message = self.find(number)
            if message is None:
                return _page("Not found", "<h1>No such message</h1>", 404)
            link = ""
            if message.link:
                href = escape(message.link)
                link = f'<p><a id=verify-link href="{href}">Open the verification link</a></p>'

            return _page(
                message.subject,
                f"<h1>{escape(message.subject)}</h1>"
                f"<p>To {escape(', '.join(message.recipients))} · {escape(message.message_id)}</p>"
                f"{link}<pre>{escape(message.text)}</pre>"
                '<p><a href="/dev/inbox">Back to the inbox</a></p>',
            )

        @app.get("/dev/inbox.json", include_in_schema=False, **access("open"))
        async def inbox_json() -> list[dict[str, Any]]:
            return [
                {
                    "number": m.number,
                    "to": list(m.recipients),
                    "subject": m.subject,
                    "message_id": m.message_id,
                    "link": m.link,
                }
                for m in self.messages
            ]


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    html = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)}</title><style>body{{font-family:system-ui,sans-serif;"
        "margin:2rem;color:#1d2330}table{border-collapse:collapse}td,th{padding:.3rem .8rem;"
        "border-bottom:1px solid #ddd;text-align:left}pre{white-space:pre-wrap;background:#f5f6f8;"
        f"padding:1rem}}</style></head><body>{body}</body></html>"
    )
    return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)
