"""The dev inbox: an SMTP server that keeps what it receives, and tells watchers of changes.

Only `notifier dev` runs it. Each message is kept as it arrived, one `.eml` file in the data
directory's `inbox/`, so the inbox survives a restart and any mail client can open a
message. The newest INBOX_CAPACITY are kept; their headlines are held in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import logging
import os
import re
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import anyio

log = logging.getLogger(__name__)

# Captured messages kept; older ones are deleted as new ones arrive.
INBOX_CAPACITY = 500
# Bytes one message may have; the dev inbox receives only notifier's own few-KB emails.
MAX_MESSAGE_BYTES = 10 * 1024 * 1024
INBOX_DIRECTORY = "inbox"
# Holds the highest number ever given, so numbers (and so URLs) are never reused after
# "Delete all" empties the directory.
LAST_NUMBER_FILE = "last-number"
_FILENAME = re.compile(r"^(\d{8})\.eml$")
# A verification link is found in linear time whatever a message holds (anyone local can
# mail the inbox, and this runs as the message arrives): each run of URL characters is
# looked at once, and one holding "/verify?token=" is cut back to the last "http" before it.
# (A regex from "https?://" to "/verify" would rescan the rest of the run from every
# "http://" in it: quadratic.)
_URL_RUN = re.compile(r"[^\s\"'<>]+")
_VERIFY = "/verify?token="
_TOKEN = re.compile(r"[A-Za-z0-9._-]+")
# A verification code as the shipped templates write it in the text part: grouped digits
# alone on a line ("123 456").
_CODE = re.compile(r"^[ \t]*(\d{3,4}(?: \d{3,4}){1,2})[ \t]*$", re.MULTILINE)
# Characters of the text part the list shows as a message's preview.
PREVIEW_CHARS = 140
# Characters of the text part a search looks through: a search costs at most this much per
# message, whatever was mailed in.
SEARCHED_TEXT_CHARS = 20_000
# notifier's own Message-IDs name their verification (notifier.verifications.message_id_for).
_VERIFICATION_ID = re.compile(r"^<verify\.([0-9a-f-]{36})@", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Captured:
    """The headline of one received message (its body stays on disk until it is opened)."""

    number: int
    received_at: datetime
    message_id: str
    sender: str  # the From header as written, else the envelope sender
    recipients: tuple[str, ...]
    subject: str
    link: str | None
    has_html: bool
    # The verification code it carries, as written ("123 456"), if any.
    code: str | None = None
    # The text part's start on one line, for the list.
    preview: str = ""
    # Subject, addresses and the text part's first SEARCHED_TEXT_CHARS, casefolded once.
    searched: str = ""

    def matches(self, query: str) -> bool:
        """Whether `query` occurs (ignoring case) in the subject, an address or the text.

        A substring test over a bounded haystack: Python's two-way search is linear in it."""
        needle = query.strip().casefold()
        return not needle or needle in self.searched

    @property
    def verification_id(self) -> str | None:
        """The verification this message delivers, read from notifier's Message-ID."""
        found = _VERIFICATION_ID.match(self.message_id)
        return found.group(1).lower() if found else None


@dataclass(frozen=True, slots=True)
class Opened:
    """One message read back whole: its source, parts and headers."""

    captured: Captured
    raw: bytes
    text: str | None
    html: str | None
    headers: tuple[tuple[str, str], ...]


class Inbox:
    """Owns the dev inbox directory: loads what is there when built, adds what the SMTP
    server receives from `start()` until `stop()`, and wakes watchers on every change until
    `close()`."""

    def __init__(self, directory: Path, capacity: int = INBOX_CAPACITY) -> None:
        self.directory = directory
        self.capacity = capacity
        self.version = 0
        self.closed = False
        self.port: int | None = None
        self._server: Any = None
        self._changed = anyio.Event()
        self._messages: list[Captured] = []  # newest first
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        # The messages hold live links: only their owner may read them.
        self.directory.chmod(0o700)
        self._last_number = self._read_last_number()
        self._load()

    # -- reading -------------------------------------------------------------------------------

    @property
    def messages(self) -> list[Captured]:
        """Every kept message, newest first."""
        return list(self._messages)

    def search(self, query: str = "") -> list[Captured]:
        return [m for m in self._messages if m.matches(query)]

    def find(self, number: int) -> Captured | None:
        return next((m for m in self._messages if m.number == number), None)

    def find_by_message_id(self, message_id: str) -> Captured | None:
        """The newest message with this Message-ID (angle brackets optional)."""
        wanted = message_id.strip().strip("<>")
        return next((m for m in self._messages if m.message_id.strip("<>") == wanted), None)

    def open(self, number: int) -> Opened | None:
        captured = self.find(number)
        if captured is None:
            return None
        try:
            raw = self._path(number).read_bytes()
        except FileNotFoundError:
            return None
        parsed = _parse(raw)
        return Opened(
            captured=captured,
            raw=raw,
            text=_body(parsed, "plain"),
            html=_body(parsed, "html"),
            headers=tuple((name, _header_text(value)) for name, value in parsed.raw_items()),
        )

    # -- changing ------------------------------------------------------------------------------

    def add(self, raw: bytes, envelope_sender: str, recipients: list[str]) -> Captured:
        """Keep one message: written whole to its file, then listed, then announced.

        Like a mail server delivering to a mailbox, the envelope is recorded in headers on
        top (Return-Path, one Delivered-To per recipient), so it is kept in the file too.
        """
        envelope = f"Return-Path: <{_one_line(envelope_sender)}>\r\n" + "".join(
            f"Delivered-To: {_one_line(r)}\r\n" for r in recipients
        )
        raw = envelope.encode("utf-8", "replace") + raw
        number = self._last_number + 1
        path = self._path(number)
        temporary = path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        # A crash leaves a whole file or none, never half a message.
        os.replace(temporary, path)
        self._last_number = number
        received_at = datetime.now().astimezone()
        captured = _headline(number, received_at, raw)
        self._messages.insert(0, captured)
        for old in self._messages[self.capacity :]:
            self._path(old.number).unlink(missing_ok=True)
        del self._messages[self.capacity :]
        self._announce()
        return captured

    def delete(self, number: int) -> bool:
        """Delete one message; whether it was there."""
        captured = self.find(number)
        if captured is None:
            return False
        self._path(number).unlink(missing_ok=True)
        self._messages.remove(captured)
        self._write_last_number()
        self._announce()
        return True

    def clear(self) -> int:
        """Delete every message; returns how many there were."""
        count = len(self._messages)
        self._write_last_number()
        for message in self._messages:
            self._path(message.number).unlink(missing_ok=True)
        self._messages.clear()
        self._announce()
        return count

    # -- watching ------------------------------------------------------------------------------

    async def wait_beyond(self, seen: int) -> int:
        """Wait until the inbox has changed since version `seen` (or is closed); the version."""
        # Checking the version and then waiting cannot miss a change: both happen on the
        # event loop's thread without an await between them.
        while self.version == seen and not self.closed:
            await self._changed.wait()
        return self.version

    def close(self) -> None:
        """Release every watcher for good, so open event streams end and a server can stop."""
        self.closed = True
        self._changed.set()

    def _announce(self) -> None:
        self.version += 1
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    # -- SMTP ----------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        from aiosmtpd.smtp import SMTP  # only dev mode needs aiosmtpd (the dev extra)

        def session() -> SMTP:
            return SMTP(
                self,
                hostname="notifier-dev-inbox",
                enable_SMTPUTF8=True,
                data_size_limit=MAX_MESSAGE_BYTES,
            )

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(session, host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        self.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.add(envelope.original_content, envelope.mail_from, list(envelope.rcpt_tos))
        return "250 2.0.0 Ok: kept in the dev inbox"

    # -- files ---------------------------------------------------------------------------------

    def _path(self, number: int) -> Path:
        return self.directory / f"{number:08d}.eml"

    def _load(self) -> None:
        numbered = sorted(
            (int(match.group(1)), entry)
            for entry in self.directory.iterdir()
            if (match := _FILENAME.match(entry.name))
        )
        excess = max(len(numbered) - self.capacity, 0)
        for _, stale in numbered[:excess]:
            stale.unlink(missing_ok=True)
        for number, entry in reversed(numbered[excess:]):
            try:
                raw = entry.read_bytes()
                received_at = datetime.fromtimestamp(entry.stat().st_mtime).astimezone()
            except OSError as exc:
                log.warning("dev inbox: skipping %s (%s)", entry, exc)
                continue
            self._messages.append(_headline(number, received_at, raw))
            self._last_number = max(self._last_number, number)
        for leftover in self.directory.glob("*.tmp"):
            leftover.unlink(missing_ok=True)

    def _read_last_number(self) -> int:
        with contextlib.suppress(FileNotFoundError, ValueError):
            return int((self.directory / LAST_NUMBER_FILE).read_text().strip())
        return 0

    def _write_last_number(self) -> None:
        (self.directory / LAST_NUMBER_FILE).write_text(f"{self._last_number}\n")


def _parse(raw: bytes) -> EmailMessage:
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    return parsed


def verify_link(text: str) -> str | None:
    """The first verification link in `text` (as written, `&amp;` unescaped), in one pass."""
    for run in _URL_RUN.finditer(text):
        url = run.group(0)
        at = url.find(_VERIFY)
        if at == -1:
            continue
        start = max(url.rfind("http://", 0, at), url.rfind("https://", 0, at))
        token = _TOKEN.match(url, at + len(_VERIFY))
        if start != -1 and token is not None:
            return url[start : token.end()].replace("&amp;", "&")
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _headline(number: int, received_at: datetime, raw: bytes) -> Captured:
    """What the list shows of a message. Whatever arrives is kept, so nothing here may raise
    on a malformed message: an unreadable header reads as empty."""
    parsed = _parse(raw)
    text = _body(parsed, "plain") or ""
    html = _body(parsed, "html")
    link = verify_link(text) or verify_link(html or "")
    subject = _safe(parsed, "Subject")
    sender = _safe(parsed, "From") or _safe(parsed, "Return-Path").strip("<>")
    recipients = tuple(_safe_all(parsed, "Delivered-To")) or tuple(
        a.strip() for a in _safe(parsed, "To").split(",") if a.strip()
    )
    return Captured(
        number=number,
        received_at=received_at,
        message_id=_safe(parsed, "Message-ID"),
        sender=sender,
        recipients=recipients,
        subject=subject,
        link=link,
        has_html=html is not None,
        code=code.group(1) if (code := _CODE.search(text)) else None,
        preview=_one_line(text[: PREVIEW_CHARS * 4])[:PREVIEW_CHARS],
        searched="\n".join((subject, sender, *recipients, text[:SEARCHED_TEXT_CHARS])).casefold(),
    )


def _safe(parsed: EmailMessage, name: str) -> str:
    try:
        return " ".join(str(parsed.get(name, "")).split())
    except Exception:  # the email package raises assorted errors on hostile headers
        return ""


def _safe_all(parsed: EmailMessage, name: str) -> list[str]:
    try:
        return [_one_line(str(v)) for v in parsed.get_all(name, [])]
    except Exception:
        return []


def _header_text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return repr(value)


def _body(parsed: EmailMessage, subtype: str) -> str | None:
    try:
        part = parsed.get_body((subtype,))
        if part is None or part.get_content_type() != f"text/{subtype}":
            return None
        content = part.get_content()
    except Exception:
        return None
    if not isinstance(content, str):
        return None
    # The wire's CRLF line ends, as the page and any reader expect them.
    return content.replace("\r\n", "\n")
