"""Redaction of email addresses in anything that leaves the process: logs, spans, stored errors."""

from __future__ import annotations

import re

# Over-matching is the safe failure here, so the local part takes anything that is not
# whitespace or a delimiter that cannot appear unquoted in an address. The domain stays
# strict (labels of word characters and hyphens, or an address literal) because it is kept
# as is: a lax domain pattern could swallow the start of a following address and leak it.
_LOCAL = r"[^\s<>()\[\]{},;:\"@\\]+"
_DOMAIN = r"(?:\[[^\]\s]*\]|[\w-]+(?:\.[\w-]+)*)"
_EMAIL_LIKE = re.compile(rf"(?P<local>{_LOCAL})@(?P<domain>{_DOMAIN})")

MASK = "***"


def redact_email(address: str) -> str:
    """`bob@example.com` -> `b***@example.com`: the first character and the domain survive.

    Never raises: input without an `@` keeps only its first character, and surrounding
    angle brackets (`<bob@example.com>`) are kept around the redacted address.
    """
    stripped = address.strip()
    if len(stripped) >= 2 and stripped.startswith("<") and stripped.endswith(">"):
        return f"<{redact_email(stripped[1:-1])}>"
    local, at, domain = stripped.rpartition("@")
    if not at:
        # No domain to keep: this is not an address, but it may still be one in part.
        return f"{stripped[:1]}{MASK}"
    return f"{local[:1]}{MASK}@{domain}"


def redact_text(text: str) -> str:
    """Free text (e.g. an SMTP reply) with every email-like substring redacted."""
    return _EMAIL_LIKE.sub(lambda m: f"{m['local'][:1]}{MASK}@{m['domain']}", text)
