"""What an SMTP server's replies and failures mean: transient, throttled, permanent (and
whose problem), or unknown; which say the deployment is misconfigured; and how a reply is
kept (one line, escaped, redacted, bounded). The transport (notifier.delivery.mailer)
asks; this decides.
"""

from __future__ import annotations

import logging
import re
import ssl
from dataclasses import dataclass
from typing import Literal

from aiosmtplib import (
    SMTPAuthenticationError,
    SMTPException,
    SMTPNotSupported,
    SMTPRecipientsRefused,
    SMTPResponseException,
)

from notifier.addresses import LONGEST_ADDRESS
from notifier.outcomes import Refusal, SendOutcome
from notifier.redact import printable, redact_text

log = logging.getLogger(__name__)

# Replies are stored with the delivery and copied into logs and spans; a server can send
# kilobytes of text, and none of it is worth keeping beyond this.
REPLY_LIMIT_CHARS = 500
# A reply is cut to this much before it is redacted, so its cost is bounded whatever the
# server sent, and an address across the final cut is still whole when it is redacted.
_REPLY_WINDOW_CHARS = REPLY_LIMIT_CHARS + 2 * LONGEST_ADDRESS

# "Service not available, closing transmission channel": the server is hanging up.
SERVICE_CLOSING = 421
# "Authentication required" at MAIL: the deployment lacks credentials, the message is fine.
AUTH_REQUIRED = 530

# Replies a provider throttles with (SES 454, Gmail 421/450, Microsoft 451/452, Postfix's
# own 450/452 rate limits), when their words say rate: "Throttling failure: Maximum sending
# rate exceeded", "Daily message quota exceeded", "receiving mail at a rate", "too many
# messages". A 4xx without such words (greylisting, a full mailbox) stays transient.
THROTTLE_CODES = frozenset({421, 450, 451, 452, 454})
_THROTTLING = re.compile(
    r"throttl|rate (?:limit|exceeded|that prevents)|sending rate|at a rate|unusual rate"
    r"|too many (?:messages|recipients|connections|emails|mails)|quota|slow down",
    re.IGNORECASE,
)

Phase = Literal["connect", "mail", "rcpt", "data"]
# An enhanced status code (RFC 3463) at the start of a reply's text: class.subject.detail.
_ENHANCED = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})\b")
# 5.1.7 and 5.1.8 speak of the sender's address, not the recipient's mailbox.
_SENDER_ADDRESS_DETAILS = frozenset({7, 8})


CONFIGURATION_REFUSALS: dict[Phase, str] = {
    "connect": "the server refused the connection",
    "mail": "the server refused the sender (MAIL FROM); those deliveries fail, recipients "
    "are not suppressed",
    "rcpt": "the server refused a recipient for policy reasons; that delivery fails, the "
    "recipient is not suppressed",
    "data": "the server refused a message's content or our policy standing; that delivery "
    "fails, the recipient is not suppressed",
}


def refusal_of(phase: Phase, reply: str) -> Refusal:
    """Whose problem a 5xx reply at `phase` is, from the phase and the reply's enhanced
    status code (RFC 3463): 5.1.x (bad mailbox, except the sender's 5.1.7/5.1.8) and 5.2.x
    (mailbox disabled or full) are the recipient's; 5.7.x (policy, security) and 5.6.x
    (content) are ours; a bare 5xx at RCPT is the recipient's, at MAIL FROM or after the
    body ours."""
    if phase == "mail":
        return "configuration"
    enhanced = _ENHANCED.match(reply)
    subject, detail = (int(enhanced[2]), int(enhanced[3])) if enhanced else (None, None)
    if subject == 7 or (subject == 1 and detail in _SENDER_ADDRESS_DETAILS) or subject == 6:
        return "configuration"
    if subject in (1, 2):
        return "recipient"
    if phase == "rcpt":
        return "recipient"
    if phase == "data":
        return "configuration"
    return "message"


# A provider's daily sending quota, spent: SES's 454 "Daily message quota exceeded", Google's
# 550 5.4.5 "Daily sending quota exceeded". Ours, never the recipient's, even as a 5xx.
_QUOTA_SPENT = re.compile(
    r"daily (?:message |sending )?quota|sending quota exceeded", re.IGNORECASE
)


def quota_spent(code: int | None, text: str | None) -> bool:
    """Whether a reply says the sending account's daily quota is spent: every worker then
    pauses until the day rolls over, rather than spend retries against it."""
    return code is not None and 400 <= code < 600 and _QUOTA_SPENT.search(text or "") is not None


def throttles(code: int | None, text: str | None) -> bool:
    """Whether a reply asks us to slow down (a rate or a quota) rather than refuse this
    message: such a try hands its attempt back and is retried after a short wait."""
    return code in THROTTLE_CODES and _THROTTLING.search(text or "") is not None


def configuration_problem(exc: Exception, phase: Phase) -> str | None:
    """What is wrong with the deployment, if `exc` says something is: these never burn a
    delivery as permanent, since fixing the settings makes the same message go out."""
    if isinstance(exc, SMTPAuthenticationError):
        return "the server refused the AUTH credentials"
    if isinstance(exc, SMTPNotSupported):
        return "the server does not support what the settings require"
    if caused_by(exc, ssl.SSLError):
        return "TLS could not be set up"
    if isinstance(exc, SMTPResponseException) and exc.code == AUTH_REQUIRED:
        return "the server requires AUTH (set NOTIFIER_SMTP_USERNAME and _PASSWORD)"
    if phase == "connect" and not isinstance(exc, (SMTPResponseException, OSError)):
        # e.g. STARTTLS or AUTH demanded but not offered, or settings aiosmtplib rejects.
        return "the connection could not be set up as configured"
    return None


def caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def reply_of(exc: Exception) -> tuple[int | None, str | None]:
    """The server's reply code and text carried by `exc`, if it carries one."""
    if isinstance(exc, SMTPRecipientsRefused) and exc.recipients:
        # What aiosmtplib's sendmail raises; it wraps each recipient's own reply.
        first = exc.recipients[0]
        return first.code, kept_text(first.message)
    if isinstance(exc, SMTPResponseException) and exc.code > 0:
        return exc.code, kept_text(exc.message)
    return None, None


def leaves_connection_usable(exc: Exception) -> bool:
    """After a refusal the session is still in step; after anything else it may not be."""
    if isinstance(exc, SMTPRecipientsRefused):
        return True
    if isinstance(exc, SMTPResponseException):
        return 400 <= exc.code < 600 and exc.code != SERVICE_CLOSING
    return isinstance(exc, ValueError)


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def kept_text(text: str) -> str:
    """A reply as it is kept: one line (a multi-line reply's lines joined by spaces), any
    other control character escaped, addresses redacted, at most REPLY_LIMIT_CHARS."""
    window = text.strip()[:_REPLY_WINDOW_CHARS]
    one_line = " ".join(window.splitlines())
    return redact_text(printable(one_line))[:REPLY_LIMIT_CHARS]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a failed SMTP exchange means: its outcome, the reply that decided it, whose
    problem a permanent refusal is, and what to tell the operator (None: nothing)."""

    outcome: SendOutcome
    code: int | None
    reply: str | None
    refusal: Refusal | None = None
    alert: str | None = None
    # The provider's daily quota is spent (a throttled outcome): pause every worker.
    quota_spent: bool = False


def verdict_of(exc: Exception, phase: Phase, *, body_sent: bool) -> Verdict:
    """The meaning of `exc`, raised at `phase` of a transaction, once any of the body may
    have left (`body_sent`) or before."""
    problem = configuration_problem(exc, phase)
    if problem is not None:
        # Fixing the settings makes the same message go out: transient, and loud.
        code = exc.code if isinstance(exc, SMTPResponseException) else None
        return Verdict("transient", code, f"{problem}: {exc}", alert=problem)
    code, text = reply_of(exc)
    if quota_spent(code, text):
        return Verdict("throttled", code, text, quota_spent=True)
    if throttles(code, text):
        return Verdict("throttled", code, text)
    if code is not None and phase != "connect" and 400 <= code < 500:
        return Verdict("transient", code, text)
    if code is not None and phase != "connect" and 500 <= code < 600:
        refusal = refusal_of(phase, text or "")
        alert = CONFIGURATION_REFUSALS[phase] if refusal == "configuration" else None
        return Verdict("permanent", code, text, refusal, alert)
    if phase in ("mail", "rcpt") and isinstance(exc, ValueError):
        # aiosmtplib refuses, before writing anything, an address it cannot put on the
        # wire (control characters, a malformed address, a non-ASCII one without SMTPUTF8).
        return Verdict("permanent", None, f"the address cannot be sent: {exc}", "message")
    if not isinstance(exc, (SMTPException, OSError)):
        log.error("unexpected error while sending (%s)", phase, exc_info=exc)
    # What is left is the connection failing us: a refused or lost connection, a timeout, a
    # reply that does not parse. Before the body that is simply worth another try (a 354
    # that never came included); once the body may have reached the server, nobody knows
    # whether it was kept.
    outcome: SendOutcome = "unknown" if body_sent else "transient"
    return Verdict(outcome, code, text or describe(exc))
