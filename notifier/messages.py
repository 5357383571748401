"""The verification email: its templates, and the message composed from them."""

from __future__ import annotations

import binascii
import email.policy
import email.utils
import html
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.header import Header
from email.message import EmailMessage
from importlib import resources
from pathlib import Path
from string import Template

from notifier.errors import ConfigError

# The environment variable naming a directory of template overrides.
TEMPLATE_DIR_VARIABLE = "NOTIFIER_TEMPLATE_DIR"
SUBJECT_FILE = "subject.txt"
TEXT_FILE = "body.txt"
HTML_FILE = "body.html"
TEMPLATE_FILES = (SUBJECT_FILE, TEXT_FILE, HTML_FILE)

# What a template may use: `$link` (the verification URL), `$email` (the recipient),
# `$purpose` (what is being verified, e.g. "signup"), `$expires_minutes` (whole minutes the
# link stays valid, rounded down so it is never overstated) and `$expires_at` (UTC, e.g.
# "2025-06-01 12:00 UTC"). Anything else is rejected when the templates load, rather than
# left in a sent email as a literal `$name`.
VARIABLES = frozenset({"link", "email", "purpose", "expires_minutes", "expires_at"})

SECONDS_PER_MINUTE = 60


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One composed email, ready for a transport; immutable, so a retry resends the same bytes.

    `message_id` is the stable id given at enqueue (e.g. `<verify.UUID@example.com>`) and is
    used verbatim, so every attempt of one delivery carries the same Message-ID. `date` is
    when it was composed (the Date header); None means the moment `to_email` is called.
    """

    message_id: str
    sender: str
    recipient: str
    subject: str
    text: str
    html: str
    date: datetime | None = None

    def to_bytes(self) -> bytes:
        """The message as CRLF bytes, ready for DATA.

        The email package's modern policy spends about a millisecond per message folding
        headers, which caps a worker at a few hundred sends a second. This message always
        has the same shape, so when its addresses and header values are plain ASCII it is
        assembled directly (bodies encoded by binascii's quoted-printable); anything else
        goes through the email package.
        """
        headers = (self.sender, self.recipient, self.message_id)
        if not all(h.isascii() for h in headers):
            return self.to_email().as_bytes(policy=email.policy.SMTPUTF8)
        subject = single_line(self.subject)
        if not subject.isascii() or len(subject) > MAX_PLAIN_SUBJECT:
            subject = Header(subject, "utf-8").encode(linesep="\r\n")
        date = email.utils.format_datetime(self.date or datetime.now(UTC))
        # "=_" never occurs in quoted-printable output, so no body can contain the boundary.
        boundary = f"=_notifier_{secrets.token_hex(12)}"
        head = (
            f"From: {self.sender}\r\nTo: {self.recipient}\r\nSubject: {subject}\r\n"
            f"Message-ID: {self.message_id}\r\nDate: {date}\r\nMIME-Version: 1.0\r\n"
            f'Content-Type: multipart/alternative; boundary="{boundary}"\r\n\r\n'
        )
        parts = [head.encode("ascii")]
        for subtype, body in (("plain", self.text), ("html", self.html)):
            parts.append(
                f'--{boundary}\r\nContent-Type: text/{subtype}; charset="utf-8"\r\n'
                "Content-Transfer-Encoding: quoted-printable\r\n\r\n".encode("ascii")
            )
            parts.append(_quoted_printable(body))
            parts.append(b"\r\n")
        parts.append(f"--{boundary}--\r\n".encode("ascii"))
        return b"".join(parts)

    def to_email(self) -> EmailMessage:
        """A multipart/alternative (text, then HTML) message whose lines end in CRLF."""
        message = EmailMessage(policy=email.policy.SMTP)
        message["From"] = self.sender
        message["To"] = self.recipient
        # Single-lined again here, not only in compose: a subject that reaches a header
        # with a line break in it is a header injection, whoever built the message.
        message["Subject"] = single_line(self.subject)
        message["Message-ID"] = self.message_id
        message["Date"] = email.utils.format_datetime(self.date or datetime.now(UTC))
        # Quoted-printable keeps the body 7-bit, so any server takes it without 8BITMIME.
        message.set_content(self.text, subtype="plain", charset="utf-8", cte="quoted-printable")
        message.add_alternative(self.html, subtype="html", charset="utf-8", cte="quoted-printable")
        # add_alternative builds the part as a whole EmailMessage, which stamps its own
        # MIME-Version; RFC 2045 wants it once, at the top.
        for part in message.iter_parts():
            del part["MIME-Version"]
        return message


# A longer subject is RFC 2047-encoded, which also folds it under the 998-octet line limit.
MAX_PLAIN_SUBJECT = 900


def _quoted_printable(text: str) -> bytes:
    """UTF-8 quoted-printable with CRLF line ends (soft breaks included)."""
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    if not normalised.endswith("\n"):
        normalised += "\n"
    encoded = binascii.b2a_qp(normalised.encode("utf-8"), istext=True)
    return encoded.replace(b"\n", b"\r\n")


def single_line(text: str) -> str:
    """Text fit for a header: every run of whitespace (CR, LF, and the Unicode line
    separators included) becomes one space, and other control characters are dropped."""
    collapsed = " ".join(text.split())
    return "".join(c for c in collapsed if c.isprintable())


@dataclass(frozen=True, slots=True)
class Templates:
    """The three templates of the verification email, parsed and checked once at start.

    Built with `load` (or `from_env`) and then shared read-only by every send.
    """

    subject: Template
    text: Template
    html: Template

    @classmethod
    def load(cls, directory: Path | None) -> Templates:
        """The shipped templates, with any of them overridden by a file in `directory`.

        A directory that is missing, unreadable, or holds none of the template files, or an
        override that does not parse, is a ConfigError naming NOTIFIER_TEMPLATE_DIR.
        """
        overrides = _list_overrides(directory) if directory is not None else {}
        parsed: dict[str, Template] = {}
        for name in TEMPLATE_FILES:
            path = overrides.get(name)
            if path is None:
                # A broken shipped template is a packaging bug, not a deployment's mistake.
                parsed[name] = _parse(_default_source(name), name)
                continue
            try:
                parsed[name] = _parse(path.read_text(encoding="utf-8"), str(path))
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(TEMPLATE_DIR_VARIABLE, f"cannot read {path}: {exc}") from exc
            except ValueError as exc:
                raise ConfigError(TEMPLATE_DIR_VARIABLE, str(exc)) from exc
        return cls(subject=parsed[SUBJECT_FILE], text=parsed[TEXT_FILE], html=parsed[HTML_FILE])

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Templates:
        """`load` with NOTIFIER_TEMPLATE_DIR's directory, or the shipped templates if unset."""
        env = os.environ if env is None else env
        raw = env.get(TEMPLATE_DIR_VARIABLE, "").strip()
        return cls.load(Path(raw) if raw else None)

    def compose(
        self,
        *,
        message_id: str,
        sender: str,
        recipient: str,
        link: str,
        expires_at: datetime,
        purpose: str,
        now: datetime,
    ) -> OutgoingMessage:
        """Render the templates for one recipient. `expires_at` and `now` must be aware."""
        if expires_at.tzinfo is None or now.tzinfo is None:
            raise ValueError("expires_at and now must be timezone-aware datetimes")
        remaining_seconds = (expires_at - now).total_seconds()
        values = {
            "link": link,
            "email": recipient,
            "purpose": purpose,
            "expires_minutes": str(max(0, int(remaining_seconds // SECONDS_PER_MINUTE))),
            "expires_at": expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        }
        escaped = {name: html.escape(value, quote=True) for name, value in values.items()}
        return OutgoingMessage(
            message_id=message_id,
            sender=sender,
            recipient=recipient,
            subject=single_line(self.subject.safe_substitute(values)),
            text=self.text.safe_substitute(values),
            html=self.html.safe_substitute(escaped),
            date=now,
        )


def _list_overrides(directory: Path) -> dict[str, Path]:
    try:
        present = {entry.name: entry for entry in directory.iterdir() if entry.is_file()}
    except OSError as exc:
        # FileNotFoundError, NotADirectoryError and PermissionError alike: the operator
        # pointed us somewhere we cannot use, and should hear it at start.
        raise ConfigError(
            TEMPLATE_DIR_VARIABLE, f"cannot read the directory {directory}: {exc}"
        ) from exc
    overrides = {name: present[name] for name in TEMPLATE_FILES if name in present}
    if not overrides:
        # Most likely a misspelt file name; silently sending the defaults would hide it.
        raise ConfigError(
            TEMPLATE_DIR_VARIABLE,
            f"{directory} holds none of {', '.join(TEMPLATE_FILES)}",
        )
    return overrides


def _default_source(name: str) -> str:
    return resources.files("notifier").joinpath("templates", name).read_text(encoding="utf-8")


def _parse(source: str, where: str) -> Template:
    template = Template(source)
    if not template.is_valid():
        raise ValueError(
            f"{where}: a `$` that starts no placeholder (write `$$` for a literal dollar sign)"
        )
    unknown = sorted(set(template.get_identifiers()) - VARIABLES)
    if unknown:
        raise ValueError(
            f"{where}: unknown variable(s) {', '.join('$' + u for u in unknown)}; "
            f"known: {', '.join('$' + v for v in sorted(VARIABLES))}"
        )
    return template
