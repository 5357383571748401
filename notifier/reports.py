"""What a mail system reports about a delivery after it accepted it, in one shape whatever
carried the report: a delivery status notification (RFC 3464) or a feedback report (ARF,
RFC 5965) mailed back to the return path, or, later, a provider's callback. A provider is
one module that turns its own events into these.

    kind         delivered | deferred | bounced | complained
    bounce_type  permanent | transient | undetermined (bounced only)
    status       the enhanced status code the report gave ("5.1.1"), if any
    diagnostic   the remote server's words, one line, redacted and bounded
    report_id    what de-duplicates it: the same report twice changes nothing twice

What each does (storage.reports, schema 0020): a permanent bounce of a sent delivery makes
it `bounced` and suppresses the address when the recipient's own mailbox caused it (never a
5.7.x policy bounce, which alerts the operator); a transient or undetermined one is only
counted; a complaint suppresses the address until an operator clears it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from notifier.redact import kept_line

ReportKind = Literal["delivered", "deferred", "bounced", "complained"]
BounceType = Literal["permanent", "transient", "undetermined"]
# Where a report came from.
ReportSource = Literal["dsn", "arf", "mail", "ses"]
# A report's diagnostic, as kept, is at most this long.
DIAGNOSTIC_CHARS = 300


@dataclass(frozen=True, slots=True)
class Report:
    """One report about one delivery, normalised."""

    outbox_id: int
    report_id: str
    kind: ReportKind
    source: ReportSource
    bounce_type: BounceType | None = None
    status: str | None = None
    diagnostic: str | None = None


def diagnostic_of(words: str) -> str:
    """A remote server's words as a report keeps them: one line, printable, redacted,
    bounded (whoever sent the report chose them)."""
    return kept_line(words, DIAGNOSTIC_CHARS)


def recipients_own(status: str | None) -> bool:
    """Whether a permanent bounce's status says the recipient's own mailbox refused it (the
    only refusal that suppresses): 5.1.x, the address (but 5.1.7 and 5.1.8, the sender's),
    and 5.2.x, the mailbox (disabled, full). A policy or content bounce (5.7.x, 5.6.x) is
    ours to fix, and a status that says neither suppresses nobody."""
    if status is None:
        return False
    _, subject, detail = [*status.split("."), "", ""][:3]
    return subject == "2" or (subject == "1" and detail not in ("7", "8"))


def ours_to_fix(status: str | None) -> bool:
    """Whether a permanent bounce is a policy or content refusal (5.7.x, 5.6.x): the
    operator is told, the recipient is not suppressed."""
    return status is not None and status.split(".")[1:2] in (["7"], ["6"])
