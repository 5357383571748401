"""Email addresses: what is accepted, what mail goes to, and which mailbox limits count.

Three forms of one address:
- as given (validated; the domain normalised): what is stored and shown, and what the
  message's To header says;
- for the SMTP envelope: the domain in its IDNA (punycode) form, so an ASCII local part at
  an internationalised domain needs no SMTPUTF8 (only a non-ASCII local part does);
- the canonical mailbox: lowercased, sub-address tags stripped, IDNA domain, and the large
  providers' own rules applied (notifier.mailbox_providers: Gmail ignores dots). Every limit
  counts mailboxes, so `Ada@`, `ada@`, `ada+x@` and, at Gmail, `a.da@` share one.
- folded: the address as given, lowercased, its domain in IDNA form. A
  suppression is for this: the address a server refused, not every spelling of its mailbox
  (a server that knows no tags refuses `ada+x@` and still takes `ada@`).
"""

from __future__ import annotations

from dataclasses import dataclass

import idna
from email_validator import EmailNotValidError, validate_email

from notifier import mailbox_providers
from notifier.errors import NotifierError

# RFC 5321 §4.5.3.1.1: servers need not accept a longer local part.
LOCAL_PART_MAX_OCTETS = 64
# RFC 5321 §4.5.3.1.3 (a path of 256 octets, less its angle brackets).
LONGEST_ADDRESS = 254


class InvalidAddress(NotifierError):
    """Not an address notifier will send to; the message says why."""


@dataclass(frozen=True, slots=True)
class Address:
    """A validated recipient address in the forms notifier needs."""

    # As given, domain normalised (Unicode domains stay Unicode): stored and shown.
    display: str
    # For MAIL/RCPT: the domain in IDNA form; None when the local part is non-ASCII
    # (then only a server offering SMTPUTF8 can take it).
    ascii: str | None
    # For limits: lowercased, sub-address tag stripped, IDNA domain, provider rules.
    mailbox: str
    # The domain as limits count it (IDNA, lowercase, a provider's alias resolved).
    domain: str
    # For suppressions: the address as given, lowercased, IDNA domain.
    folded: str

    @property
    def needs_smtputf8(self) -> bool:
        return self.ascii is None


def parse(raw: str, subaddress_separators: str = "+") -> Address:
    """Validate `raw`; InvalidAddress says what is wrong with it."""
    if not isinstance(raw, str) or any(c in raw for c in "\r\n\x00"):
        raise InvalidAddress("must be a single-line email address")
    try:
        checked = validate_email(raw, check_deliverability=False)
    except EmailNotValidError as exc:
        raise InvalidAddress(str(exc)) from exc
    local = str(checked.local_part)
    if len(local.encode("utf-8")) > LOCAL_PART_MAX_OCTETS:
        raise InvalidAddress(
            f"the part before the @ is longer than {LOCAL_PART_MAX_OCTETS} characters"
        )
    domain = str(checked.ascii_domain).lower()
    ascii_form = f"{local}@{checked.ascii_domain}" if local.isascii() else None
    mailbox_local, mailbox_domain = mailbox_providers.canonical(
        _untagged(local, subaddress_separators).lower(), domain
    )
    return Address(
        display=str(checked.normalized),
        ascii=ascii_form,
        mailbox=f"{mailbox_local}@{mailbox_domain}",
        domain=mailbox_domain,
        folded=folded(f"{local}@{domain}"),
    )


def folded(address: str) -> str:
    """An address lowercased, with an internationalised domain in IDNA form: the key a
    suppression of exactly this address is stored and looked up under."""
    local, _, domain = address.rpartition("@")
    return f"{local}@{_idna(domain)}".lower()


def spellings(address: str) -> list[str]:
    """How a stored address may appear in a mail server's reply, longest first: as stored,
    in its envelope form, its local part, and its local part before a "+" tag (short local
    parts excepted: replacing two letters everywhere would hide the reply, not a person)."""
    local = address.rpartition("@")[0]
    recipient, _ = envelope_recipient(address)
    forms = {address, recipient, local, local.partition("+")[0]}
    return sorted(
        (f for f in forms if "@" in f or len(f) >= MIN_REDACTED_LOCAL_PART),
        key=len,
        reverse=True,
    )


# A local part shorter than this is not replaced in reply texts (see `spellings`).
MIN_REDACTED_LOCAL_PART = 3


def _untagged(local: str, separators: str) -> str:
    """`ada+news` -> `ada`: the tag after the first separator names the same mailbox. A
    local part that starts with a separator is kept whole (there is no mailbox before it)."""
    cut = min((i for i in (local.find(s) for s in separators) if i > 0), default=-1)
    return local[:cut] if cut > 0 else local


def envelope_recipient(address: str) -> tuple[str, bool]:
    """What RCPT TO gets for a stored address, and whether it needs SMTPUTF8."""
    local, _, domain = address.rpartition("@")
    if not local.isascii():
        return address, True
    if domain.isascii():
        return address, False
    encoded = _idna(domain)
    if encoded is domain:
        return address, True
    return f"{local}@{encoded}", False


def _idna(domain: str) -> str:
    """The domain in IDNA form (2008, UTS #46 mapping, as email-validator applied when the
    address was accepted); the domain itself when it is ASCII or cannot be encoded."""
    if domain.isascii():
        return domain
    try:
        return idna.encode(domain, uts46=True).decode("ascii")
    except idna.IDNAError:
        return domain
