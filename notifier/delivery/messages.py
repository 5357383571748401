"""The verification email: its templates (one set per language), and the message composed
from them."""

from __future__ import annotations

import binascii
import email.policy
import email.utils
import html
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.header import Header
from email.headerregistry import Address
from email.message import EmailMessage
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

from notifier.codes import grouped
from notifier.config import DEFAULT_PRODUCT_NAME, MessageSettings
from notifier.delivery import lifetimes
from notifier.delivery.lifetimes import stated_lifetime
from notifier.errors import ConfigError
from notifier.locales import DEFAULT_LOCALE, closest, normalize_locale
from notifier.outcomes import Method
from notifier.strings import PAGES_FILE, TEMPLATE_DIR_VARIABLE, PageStrings

__all__ = [
    "METHOD_FILES",
    "TEMPLATE_DIR_VARIABLE",
    "VARIABLES",
    "OutgoingMessage",
    "TemplateSet",
    "Templates",
]

# Each method's three files: subject, text body, HTML body. A link's are the files every
# release had; a code's and a link-and-code's have names of their own, so an override
# directory of an earlier release still means what it meant.
METHOD_FILES: dict[Method, tuple[str, str, str]] = {
    "link": ("subject.txt", "body.txt", "body.html"),
    "code": ("code-subject.txt", "code-body.txt", "code-body.html"),
    "link_and_code": ("link-code-subject.txt", "link-code-body.txt", "link-code-body.html"),
}
SUBJECT_FILE, TEXT_FILE, HTML_FILE = METHOD_FILES["link"]
TEMPLATE_FILES = tuple(name for files in METHOD_FILES.values() for name in files)
# What an override directory may hold: the email's templates and the pages' words.
OVERRIDABLE = (*TEMPLATE_FILES, PAGES_FILE)

# What a template may use (README.md, "The email", documents the same list):
#   $email            the recipient's address
#   $purpose          what is being verified, in the template's language: "sign-up" for
#                     signup (templates/<locale>/pages.toml [purposes]; others as asked)
#   $product_name     NOTIFIER_PRODUCT_NAME
# a link's templates (link and link_and_code):
#   $link             the verification URL
#   $expires_in       how long the link lasts, in the template's language: "60 minutes",
#                     "1 minute", "24 hours", "7 days" (the configured lifetime; see lifetimes)
#   $expires_minutes  the same in whole minutes: "60"
#   $expires_at       when it expires, in UTC: "2025-06-01 12:00 UTC"
# a code's templates (code and link_and_code):
#   $code                  the code, grouped for reading: "123 456"
#   $code_expires_in       how long the code lasts, worded like $expires_in
#   $code_expires_minutes  the same in whole minutes: "10"
# Anything else, or a variable of another method (a $link in a code's email), is rejected
# when the templates load, rather than left in a sent email as a literal `$name`.
_COMMON = frozenset({"email", "purpose", "product_name"})
_LINK = frozenset({"link", "expires_in", "expires_minutes", "expires_at"})
_CODE = frozenset({"code", "code_expires_in", "code_expires_minutes"})
METHOD_VARIABLES: dict[Method, frozenset[str]] = {
    "link": _COMMON | _LINK,
    "code": _COMMON | _CODE,
    "link_and_code": _COMMON | _LINK | _CODE,
}
VARIABLES = frozenset().union(*METHOD_VARIABLES.values())
_FILE_METHOD = {name: method for method, files in METHOD_FILES.items() for name in files}
# RFC 3834: tells vacation responders and ticket systems not to answer.
AUTO_SUBMITTED = "auto-generated"


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One composed email, ready for a transport; immutable, so a retry resends the same bytes.

    `message_id` is the stable id given at enqueue (e.g. `<verify.UUID@example.com>`) and is
    used verbatim, so every attempt of one delivery carries the same Message-ID. `date` is
    when it was composed (the Date header); None means the moment `to_email` is called.
    `sender_name` is the From header's display name ("" for the bare address).
    """

    message_id: str
    sender: str
    recipient: str
    subject: str
    text: str
    html: str
    date: datetime | None = None
    sender_name: str = ""
    # The envelope sender, when it is not `sender` (a VERP return path), and the id a DSN
    # names the message by (ENVID).
    return_path: str | None = None
    envelope_id: str | None = None

    def to_bytes(self) -> bytes:
        """The message as CRLF bytes, ready for DATA.

        The email package's modern policy spends about a millisecond per message folding
        headers, which caps a worker at a few hundred sends a second. This message always
        has the same shape, so when its addresses and header values are plain ASCII it is
        assembled directly (bodies as they are, or in binascii's quoted-printable); anything
        else goes through the email package.
        """
        headers = (self.sender, self.recipient, self.message_id)
        if not all(h.isascii() for h in headers):
            return self.to_email().as_bytes(policy=email.policy.SMTPUTF8)
        subject = single_line(self.subject)
        if not subject.isascii() or len(subject) > MAX_PLAIN_SUBJECT:
            subject = Header(subject, "utf-8").encode(linesep="\r\n")
        date = email.utils.format_datetime(self.date or datetime.now(UTC))
        # "=_" never occurs in quoted-printable output, and a 7bit body would have to guess
        # 96 random bits: no body contains the boundary.
        boundary = f"=_notifier_{secrets.token_hex(12)}"
        head = (
            f"From: {_from_header(self.sender_name, self.sender)}\r\nTo: {self.recipient}\r\n"
            f"Subject: {subject}\r\nMessage-ID: {self.message_id}\r\nDate: {date}\r\n"
            f"Auto-Submitted: {AUTO_SUBMITTED}\r\nMIME-Version: 1.0\r\n"
            f'Content-Type: multipart/alternative; boundary="{boundary}"\r\n\r\n'
        )
        parts = [head.encode("ascii")]
        for subtype, body in (("plain", self.text), ("html", self.html)):
            encoding, encoded = _transfer_encoded(body)
            parts.append(
                f'--{boundary}\r\nContent-Type: text/{subtype}; charset="utf-8"\r\n'
                f"Content-Transfer-Encoding: {encoding}\r\n\r\n".encode("ascii")
            )
            parts.append(encoded)
            parts.append(b"\r\n")
        parts.append(f"--{boundary}--\r\n".encode("ascii"))
        return b"".join(parts)

    def to_wire(self) -> bytes:
        """The message as DATA sends it (RFC 5321 4.5.2): to_bytes with every line that
        starts with a dot given a second one, ended by the lone dot, so nothing on the way
        out normalises or scans the body again."""
        payload = self.to_bytes()
        if not payload.endswith(b"\r\n"):
            payload += b"\r\n"
        # Every line end here is CRLF (both paths write them), and no message starts with
        # a dot (it starts with a header).
        return payload.replace(b"\r\n.", b"\r\n..") + b".\r\n"

    def to_email(self) -> EmailMessage:
        """A multipart/alternative (text, then HTML) message whose lines end in CRLF."""
        message = EmailMessage(policy=email.policy.SMTP)
        name = single_line(self.sender_name)
        message["From"] = Address(display_name=name, addr_spec=self.sender) if name else self.sender
        message["To"] = self.recipient
        # Single-lined again here, not only in compose: a subject that reaches a header
        # with a line break in it is a header injection, whoever built the message.
        message["Subject"] = single_line(self.subject)
        message["Message-ID"] = self.message_id
        message["Date"] = email.utils.format_datetime(self.date or datetime.now(UTC))
        message["Auto-Submitted"] = AUTO_SUBMITTED
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


@lru_cache(maxsize=16)
def _from_header(name: str, address: str) -> str:
    """The From header's value, folded by the email package itself: quoting and RFC 2047
    encoding of a display name have corner cases enough, and one sender is folded once."""
    name = single_line(name)
    if not name:
        return address
    header = EmailMessage(policy=email.policy.SMTP)
    header["From"] = Address(display_name=name, addr_spec=address)
    folded: str = email.policy.SMTP.fold("From", header["From"])
    return folded.removeprefix("From: ").removesuffix("\r\n")


# RFC 5322's limit on a line, line end excluded.
MAX_LINE_OCTETS = 998


def _transfer_encoded(text: str) -> tuple[str, bytes]:
    """A body's Content-Transfer-Encoding and its bytes with CRLF line ends: as it is
    ("7bit") when it is ASCII in lines any server takes, which costs nothing to encode;
    quoted-printable otherwise. Either way the message stays 7-bit: no server needs
    8BITMIME for it."""
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = normalised.split("\n")
    if normalised.endswith("\n"):
        lines.pop()  # the text's own last line end, not an empty line after it
    plain = normalised.isascii() and "\0" not in normalised
    if plain and max(map(len, lines), default=0) <= MAX_LINE_OCTETS:
        return "7bit", "".join(["\r\n".join(lines), "\r\n" if lines else ""]).encode("ascii")
    return "quoted-printable", _quoted_printable(text)


def _quoted_printable(text: str) -> bytes:
    """UTF-8 quoted-printable with CRLF line ends (soft breaks included).

    Quoted-printable encodes each line on its own (soft breaks and trailing whitespace
    depend only on the line), so lines are encoded one by one and remembered: most lines of
    a rendered template are the template's own and repeat in every message, and encoding the
    whole HTML body at once cost more than the rest of composing a message.
    """
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = normalised.split("\n")
    if normalised.endswith("\n"):
        lines.pop()  # the text's own last line end, not an empty line after it
    return b"".join([_quoted_printable_line(line) for line in lines])


# Lines of the shipped and overridden templates, in every language, with room to spare; a
# line holding a link or an address is unique and only passes through.
QP_LINE_CACHE_SIZE = 4096


@lru_cache(maxsize=QP_LINE_CACHE_SIZE)
def _quoted_printable_line(line: str) -> bytes:
    encoded = binascii.b2a_qp(line.encode("utf-8") + b"\n", istext=True)
    return encoded.replace(b"\n", b"\r\n")


def single_line(text: str) -> str:
    """Text fit for a header: every run of whitespace (CR, LF, and the Unicode line
    separators included) becomes one space, and other control characters are dropped."""
    collapsed = " ".join(text.split())
    if collapsed.isprintable():
        return collapsed
    return "".join(c for c in collapsed if c.isprintable())


class Filled(Template):
    """A template split once, when loaded, into its literal text and its placeholders, so
    filling it is one join: safe_substitute matches the whole template with a regular
    expression and calls back into Python for every placeholder, on every message."""

    def __init__(self, template: str) -> None:
        super().__init__(template)
        # (name, text): a placeholder's name and how it is written, or None and literal text.
        parts: list[tuple[str | None, str]] = []
        end = 0
        for match in self.pattern.finditer(template):
            parts.append((None, template[end : match.start()]))
            name = match["named"] or match["braced"]
            if name is not None:
                parts.append((name, match[0]))
            elif match["escaped"] is not None:
                parts.append((None, self.delimiter))
            else:  # an invalid `$` (refused at load; kept as text, as safe_substitute does)
                parts.append((None, match[0]))
            end = match.end()
        parts.append((None, template[end:]))
        self._parts = tuple((name, text) for name, text in parts if text)

    def fill(self, values: Mapping[str, str]) -> str:
        """What safe_substitute(values) gives: a placeholder without a value stays as written."""
        return "".join(
            [text if name is None else values.get(name, text) for name, text in self._parts]
        )


@dataclass(frozen=True, slots=True)
class MethodTemplates:
    """One method's templates in one language: subject, text body and HTML body."""

    subject: Filled
    text: Filled
    html: Filled


@dataclass(frozen=True, slots=True)
class TemplateSet:
    """One language's templates, for each method."""

    locale: str
    methods: Mapping[Method, MethodTemplates]


@dataclass(frozen=True, slots=True)
class Templates:
    """Every language's templates, parsed and checked once at start, and what the email
    calls the product and its sender.

    Built with `load` (or `from_env`) and then shared read-only by every send. English is
    always present; a request's locale picks the closest language there is.
    """

    sets: Mapping[str, TemplateSet]
    product_name: str = DEFAULT_PRODUCT_NAME
    sender_name: str = DEFAULT_PRODUCT_NAME
    # The pages' words and the purposes' (their $purpose), from the same directory.
    strings: PageStrings = field(default_factory=lambda: PageStrings.load(None))

    @classmethod
    def load(
        cls,
        directory: Path | None,
        *,
        product_name: str = DEFAULT_PRODUCT_NAME,
        sender_name: str | None = None,
    ) -> Templates:
        """The shipped templates, with any of them overridden by a file in `directory`.

        For a language L, each file comes from the first of: `directory/L/`, the shipped
        `L/`, the top of `directory` (which stands for English), the shipped `en/`. So an
        override directory may hold any subset, and a language missing a file borrows the
        English one rather than failing.

        A directory that is missing, unreadable, or holds none of the template files, a
        subdirectory not named like a locale, or an override that does not parse, is a
        ConfigError naming NOTIFIER_TEMPLATE_DIR.
        """
        shipped = _shipped()
        overrides = _list_overrides(directory) if directory is not None else {}
        sets: dict[str, TemplateSet] = {}
        for locale in sorted(shipped.keys() | overrides.keys()):
            chain = [overrides.get(locale, {}), shipped.get(locale, {})]
            if locale != DEFAULT_LOCALE:
                chain += [overrides.get(DEFAULT_LOCALE, {}), shipped[DEFAULT_LOCALE]]
            methods = {
                method: MethodTemplates(
                    *(_load_one(next(c[name] for c in chain if name in c)) for name in files)
                )
                for method, files in METHOD_FILES.items()
            }
            sets[locale] = TemplateSet(locale, methods)
            lifetimes.prepare(locale)
        return cls(
            sets=sets,
            product_name=product_name,
            sender_name=product_name if sender_name is None else sender_name,
            strings=PageStrings.load(directory),
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Templates:
        """`load` with NOTIFIER_TEMPLATE_DIR, NOTIFIER_PRODUCT_NAME and
        NOTIFIER_MAIL_FROM_NAME."""
        settings = MessageSettings.from_env(env)
        return cls.load(
            settings.template_dir,
            product_name=settings.product_name,
            sender_name=settings.sender_name,
        )

    @property
    def locales(self) -> tuple[str, ...]:
        return tuple(self.sets)

    def for_locale(self, locale: str | None) -> TemplateSet:
        """The closest language there is for `locale` (de-AT: de-AT, then de, then en)."""
        return self.sets[closest(locale, self.sets)]

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
        issued_at: datetime | None = None,
        locale: str | None = None,
        method: Method = "link",
        code: str | None = None,
        code_expires_at: datetime | None = None,
    ) -> OutgoingMessage:
        """Render `method`'s templates for one recipient, in the language closest to
        `locale`: a link's carry `link`, a code's `code` (until `code_expires_at`), a
        link-and-code's both; a code's email has no link in it.

        `issued_at` is when the verification was created: with it, the email states the
        link's configured lifetime (see lifetimes.stated_lifetime). Datetimes must be aware.
        """
        if expires_at.tzinfo is None or now.tzinfo is None:
            raise ValueError("expires_at and now must be timezone-aware datetimes")
        if issued_at is not None and issued_at.tzinfo is None:
            raise ValueError("issued_at must be a timezone-aware datetime")
        chosen = self.for_locale(locale)
        lifetime = stated_lifetime(expires_at, now, issued_at)
        values = {
            "link": link,
            "email": recipient,
            "purpose": self.strings.for_locale(chosen.locale).purpose(purpose),
            "product_name": self.product_name,
            "expires_in": lifetime.words(chosen.locale),
            "expires_minutes": str(lifetime.minutes),
            "expires_at": expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        }
        if method != "link":
            if code is None:
                raise ValueError(f"a {method} email needs its code")
            code_lifetime = stated_lifetime(code_expires_at or expires_at, now, issued_at)
            values["code"] = grouped(code)
            values["code_expires_in"] = code_lifetime.words(chosen.locale)
            values["code_expires_minutes"] = str(code_lifetime.minutes)
        escaped = {name: html.escape(value, quote=True) for name, value in values.items()}
        templates = chosen.methods[method]
        return OutgoingMessage(
            message_id=message_id,
            sender=sender,
            recipient=recipient,
            subject=single_line(templates.subject.fill(values)),
            text=templates.text.fill(values),
            html=templates.html.fill(escaped),
            date=now,
            sender_name=self.sender_name,
        )


# A template's source: an operator's file, or a shipped one.
_Source = Path | Traversable


def _shipped() -> dict[str, dict[str, _Source]]:
    root = resources.files("notifier").joinpath("templates")
    return {
        entry.name: {name: entry.joinpath(name) for name in TEMPLATE_FILES}
        for entry in root.iterdir()
        if entry.is_dir() and not entry.name.startswith((".", "_"))
    }


def _load_one(source: _Source) -> Filled:
    if not isinstance(source, Path):
        # A broken shipped template is a packaging bug, not a deployment's mistake.
        return _parse(source.read_text(encoding="utf-8"), str(source))
    try:
        return _parse(source.read_text(encoding="utf-8"), str(source))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(TEMPLATE_DIR_VARIABLE, f"cannot read {source}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(TEMPLATE_DIR_VARIABLE, str(exc)) from exc


def _list_overrides(directory: Path) -> dict[str, dict[str, _Source]]:
    """The override files by locale; files at the top of `directory` count as English."""
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        # FileNotFoundError, NotADirectoryError and PermissionError alike: the operator
        # pointed us somewhere we cannot use, and should hear it at start.
        raise ConfigError(
            TEMPLATE_DIR_VARIABLE, f"cannot read the directory {directory}: {exc}"
        ) from exc
    found: dict[str, dict[str, _Source]] = {}
    top = {e.name: e for e in entries if e.is_file() and e.name in TEMPLATE_FILES}
    subdirectories = [e for e in entries if e.is_dir() and not e.name.startswith(".")]
    for subdirectory in subdirectories:
        try:
            locale = normalize_locale(subdirectory.name)
        except ValueError as exc:
            raise ConfigError(
                TEMPLATE_DIR_VARIABLE,
                f"{subdirectory} is not named for a locale (like de or pt-BR): {exc}",
            ) from exc
        if locale in found:
            raise ConfigError(
                TEMPLATE_DIR_VARIABLE, f"{subdirectory} names the locale {locale} twice"
            )
        files = {name: subdirectory / name for name in TEMPLATE_FILES}
        found[locale] = {name: path for name, path in files.items() if path.is_file()}
        if not found[locale] and not (subdirectory / PAGES_FILE).is_file():
            # Most likely misspelt file names; silently sending the defaults would hide it.
            raise ConfigError(
                TEMPLATE_DIR_VARIABLE,
                f"{subdirectory} holds none of {', '.join(OVERRIDABLE)}",
            )
    if not top and not found and not (directory / PAGES_FILE).is_file():
        raise ConfigError(
            TEMPLATE_DIR_VARIABLE,
            f"{directory} holds none of {', '.join(OVERRIDABLE)}, nor a <locale>/ "
            "directory of them",
        )
    # en/ is explicit; the top of the directory fills in what en/ leaves out.
    found[DEFAULT_LOCALE] = {**top, **found.get(DEFAULT_LOCALE, {})}
    return found


def _parse(source: str, where: str) -> Filled:
    template = Filled(source)
    if not template.is_valid():
        raise ValueError(
            f"{where}: a `$` that starts no placeholder (write `$$` for a literal dollar sign)"
        )
    allowed = METHOD_VARIABLES[_FILE_METHOD[Path(where).name]]
    unknown = sorted(set(template.get_identifiers()) - allowed)
    if unknown:
        raise ValueError(
            f"{where}: unknown variable(s) {', '.join('$' + u for u in unknown)}; "
            f"known: {', '.join('$' + v for v in sorted(allowed))}"
        )
    return template
