"""Whose problem a permanent SMTP refusal is: only the recipient's own suppresses it."""

from __future__ import annotations

import pytest
from aiosmtplib import SMTPResponseException

from notifier.delivery.smtp_replies import Phase, refusal_of, throttles, verdict_of
from notifier.outcomes import Refusal


@pytest.mark.parametrize(
    ("phase", "reply", "whose"),
    [
        # Our sender, refused: a misconfiguration, whatever the code says.
        ("mail", "5.1.8 sender domain has no MX", "configuration"),
        ("mail", "sender rejected", "configuration"),
        # At RCPT: the recipient's, unless it is a policy refusal.
        ("rcpt", "5.1.1 <u@x>: user unknown", "recipient"),
        ("rcpt", "no such user here", "recipient"),
        ("rcpt", "5.7.1 relaying denied", "configuration"),
        ("rcpt", "5.2.1 mailbox disabled", "recipient"),
        # After the body: the recipient's only when the code says the mailbox is at fault.
        ("data", "5.2.2 mailbox full", "recipient"),
        ("data", "5.1.1 user unknown", "recipient"),
        ("data", "5.6.0 message content rejected", "configuration"),
        ("data", "5.7.1 message rejected as spam", "configuration"),
        ("data", "5.1.7 bad sender mailbox syntax", "configuration"),
        ("data", "transaction failed", "configuration"),
    ],
)
def test_a_refusal_is_blamed_by_phase_and_enhanced_status(
    phase: Phase, reply: str, whose: Refusal
) -> None:
    assert refusal_of(phase, reply) == whose


@pytest.mark.parametrize(
    ("code", "reply"),
    [
        (454, "4.7.0 Throttling failure: Maximum sending rate exceeded."),  # Amazon SES
        (454, "Throttling failure: Daily message quota exceeded."),  # Amazon SES
        (421, "4.7.28 Our system has detected an unusual rate of unsolicited mail"),  # Gmail
        (
            450,
            "4.2.1 The user you are trying to contact is receiving mail at a rate that "
            "prevents additional messages from being delivered",
        ),  # Gmail, per recipient
        (451, "4.7.500 Server busy. Please try again later. Too many messages"),  # Microsoft
        (452, "4.5.3 Too many recipients"),
        (421, "4.4.2 rate limit exceeded, slow down"),
    ],
)
def test_a_providers_rate_refusal_is_throttling(code: int, reply: str) -> None:
    assert throttles(code, reply)


@pytest.mark.parametrize(
    ("code", "reply"),
    [
        (451, "4.7.1 Greylisting in action, please come back later"),
        (452, "4.2.2 Mailbox full"),
        (421, "4.3.2 Service not available, closing transmission channel"),
        (450, "4.1.1 mailbox temporarily unavailable"),
        (550, "5.7.1 rate limit exceeded"),  # a permanent refusal stays one
        (None, "throttling"),
    ],
)
def test_any_other_reply_is_not_throttling(code: int | None, reply: str) -> None:
    assert not throttles(code, reply)


@pytest.mark.parametrize(
    ("code", "reply"),
    [
        (454, "Throttling failure: Daily message quota exceeded."),  # Amazon SES
        (550, "5.4.5 Daily sending quota exceeded. Learn more at https://support.google.com"),
        (421, "4.7.0 daily quota reached"),
    ],
)
def test_a_spent_daily_quota_is_throttling_that_pauses_whatever_its_code(
    code: int, reply: str
) -> None:
    verdict = verdict_of(SMTPResponseException(code, reply), "rcpt", body_sent=False)
    assert (verdict.outcome, verdict.quota_spent, verdict.refusal) == ("throttled", True, None)


def test_a_rate_throttle_is_no_spent_quota() -> None:
    verdict = verdict_of(
        SMTPResponseException(454, "4.7.0 Throttling failure: Maximum sending rate exceeded."),
        "rcpt",
        body_sent=False,
    )
    assert (verdict.outcome, verdict.quota_spent) == ("throttled", False)
