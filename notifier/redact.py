"""Redaction of email addresses in anything that leaves the process: logs, spans, stored errors."""

from __future__ import annotations

import re

# Over-matching is the safe failure here, so the local part takes anything that is not
# whitespace or a delimiter that cannot appear unquoted in an address. The domain stays
# strict (labels of word characters and hyphens, or an address literal) because it is kept
# as is: a lax domain pattern could swallow the start of a following address and leak it.
_DELIMITERS = r"\s<>()\[\]{},;:\"@\\"
# Linear in the length of the text, whatever it holds (invariant 15: anyone can put text
# here, as a URL, a header or a mail server's reply). Every run of local-part characters
# is matched once, possessively, with or without an "@domain" after it, so a run is never
# scanned again from each of its characters (the quadratic cost of a plain `[^...]+@`); a
# run without an address is put back as it was. An address literal ends at its "]" or at
# the next "[", "@" or space, so no "@[" makes it scan the rest of the text either (its
# local part is still redacted).
_LOCAL = rf"[^{_DELIMITERS}]++"
_DOMAIN = r"(?:\[[^\[\]\s@]*+\]?|[\w-]++(?:\.[\w-]++)*+)"
_RUN = re.compile(rf"(?P<local>{_LOCAL})(?:@(?P<domain>{_DOMAIN}))?")

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
    return _RUN.sub(_masked, text)


def _masked(match: re.Match[str]) -> str:
    domain = match["domain"]
    if domain is None:
        return match[0]
    return f"{match['local'][:1]}{MASK}@{domain}"


# Characters a terminal or a page may act on rather than show: C0 and C1 controls (an ESC
# starts a terminal escape sequence, a CR or LF starts a fake row), and the invisible
# format characters that reorder or hide text (bidi controls, zero-width characters).
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def printable(text: str) -> str:
    """`text` with every character a terminal or page could act on written as its escape
    (`\\x1b`, `\\n`, `\\u202e`), so what is shown is what was there."""
    return _UNPRINTABLE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    return match[0].encode("unicode_escape").decode("ascii")


def kept_line(text: str, limit: int) -> str:
    """A stranger's text as it is kept and shown: its whitespace runs (line breaks
    included) made single spaces, any other control character escaped, addresses redacted,
    at most `limit` characters. Only a window of the text is read, so its cost is bounded
    whatever its length."""
    one_line = " ".join(text[: limit * 4].split())
    return redact_text(printable(one_line))[:limit]


def redact_spellings(text: str, spellings: list[str]) -> str:
    """`text` with each of `spellings` (an address and its parts, longest first) replaced,
    whatever its case, by its redacted form: a server may echo an address in a shape no
    pattern recognises (`e}ada{x@...` is one the API accepts), but never in one notifier
    does not know it by."""
    if not spellings:
        return text
    if text.isascii() and all(s.isascii() for s in spellings):
        # Between ASCII strings, ignoring case is lower() on both sides exactly; most replies
        # ("250 2.0.0 Ok: queued as ...") name no spelling, and compiling a pattern for
        # each delivery's address cost a worker a twelfth of its CPU.
        lowered = text.lower()
        if not any(s.lower() in lowered for s in spellings):
            return text
    pattern = re.compile("|".join(re.escape(s) for s in spellings), re.IGNORECASE)
    return pattern.sub(lambda m: redact_email(m[0]), text)
