"""Whose problem a permanent SMTP refusal is: only the recipient's own suppresses it."""

from __future__ import annotations

import pytest

from notifier.delivery.smtp_replies import Phase, refusal_of
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
