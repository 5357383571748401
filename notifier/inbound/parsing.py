"""A report mailed back to a delivery's return path, understood: a delivery status
notification (RFC 3464: multipart/report, report-type=delivery-status), a feedback report
(ARF, RFC 5965: report-type=feedback-report), or, failing both, a message in some other
shape, which the VERP address already proved concerns this delivery: an undetermined bounce,
counted and acted on by nobody.

Only the standard library's email parser reads it, with every field bounded, so nothing a
sender writes costs more than linear time in its size.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import re
from email.message import Message

from notifier.reports import BounceType, Report, ReportKind, diagnostic_of

# Per-recipient blocks read from one DSN: a delivery has one recipient, so more is noise.
MAX_RECIPIENT_BLOCKS = 10
_STATUS = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})")
# Feedback types that say a person marked the mail unwanted (RFC 5965, 6650).
_COMPLAINTS = frozenset({"abuse", "fraud", "other", "virus"})


def reports_in(raw: bytes, outbox_id: int) -> list[Report]:
    """The reports `raw` holds about delivery `outbox_id` (never an empty list)."""
    message = email.message_from_bytes(raw, policy=email.policy.compat32)
    report_id = _report_id(message, raw)
    if message.get_content_type() == "multipart/report":
        kind = (message.get_param("report-type") or "").__str__().lower()
        if kind == "delivery-status":
            found = _delivery_status(message, outbox_id, report_id)
            if found:
                return found
        if kind == "feedback-report":
            found = _feedback(message, outbox_id, report_id)
            if found:
                return found
    return [
        Report(
            outbox_id,
            report_id,
            "bounced",
            "mail",
            bounce_type="undetermined",
            diagnostic=diagnostic_of(str(message.get("Subject", ""))),
        )
    ]


def _report_id(message: Message, raw: bytes) -> str:
    """The report's own Message-ID, else a digest of it: what de-duplicates it."""
    found = str(message.get("Message-ID", "")).strip()[:200]
    return found or "sha256:" + hashlib.sha256(raw).hexdigest()


def _delivery_status(message: Message, outbox_id: int, report_id: str) -> list[Report]:
    part = next(
        (p for p in message.walk() if p.get_content_type() == "message/delivery-status"), None
    )
    if part is None:
        return []
    blocks = (
        [b for b in part.get_payload() if isinstance(b, Message)] if part.is_multipart() else []
    )
    found = []
    for n, block in enumerate(b for b in blocks if b.get("Action") is not None):
        if n >= MAX_RECIPIENT_BLOCKS:
            break
        action = str(block.get("Action", "")).strip().lower()
        status = _status(str(block.get("Status", "")))
        diagnostic = diagnostic_of(str(block.get("Diagnostic-Code", "")).partition(";")[2])
        kind: ReportKind
        bounce_type: BounceType | None = None
        if action == "failed":
            kind = "bounced"
            bounce_type = _bounce_type(status)
        elif action == "delayed":
            kind = "deferred"
        elif action in ("delivered", "relayed", "expanded"):
            kind = "delivered"
        else:
            continue
        found.append(
            Report(
                outbox_id,
                f"{report_id}#{n}",
                kind,
                "dsn",
                bounce_type=bounce_type,
                status=status,
                diagnostic=diagnostic or None,
            )
        )
    return found


def _feedback(message: Message, outbox_id: int, report_id: str) -> list[Report]:
    part = next(
        (p for p in message.walk() if p.get_content_type() == "message/feedback-report"), None
    )
    if part is None:
        return []
    payload = part.get_payload()
    fields = (
        payload[0]
        if isinstance(payload, list) and payload
        else email.message_from_string(str(payload)[:20_000])
    )
    if not isinstance(fields, Message):
        return []
    feedback_type = str(fields.get("Feedback-Type", "")).strip().lower()
    if feedback_type not in _COMPLAINTS:
        return []
    return [
        Report(
            outbox_id,
            report_id,
            "complained",
            "arf",
            diagnostic=diagnostic_of(
                f"feedback type {feedback_type}, from {fields.get('User-Agent', 'unknown')}"
            ),
        )
    ]


def _status(text: str) -> str | None:
    match = _STATUS.match(text)
    return None if match is None else f"{match[1]}.{match[2]}.{match[3]}"


def _bounce_type(status: str | None) -> BounceType:
    if status is None:
        return "undetermined"
    return "permanent" if status.startswith("5") else "transient"
