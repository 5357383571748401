"""Addresses never reach logs, spans or stored errors whole."""

from __future__ import annotations

import pytest

from notifier.redact import redact_email, redact_text


def test_address_keeps_its_first_character_and_domain() -> None:
    assert redact_email("bob@example.com") == "b***@example.com"


def test_address_in_angle_brackets_keeps_the_brackets() -> None:
    assert redact_email("<bob@example.com>") == "<b***@example.com>"


@pytest.mark.parametrize(
    ("odd", "expected"),
    [
        ("", "***"),
        ("bob", "b***"),
        ("@example.com", "***@example.com"),
        ("bob@", "b***@"),
        ('"a@b"@example.com', '"***@example.com'),
        ("  bob@example.com \n", "b***@example.com"),
        ("<>", "<***>"),
        ("jösé@exämple.com", "j***@exämple.com"),
    ],
)
def test_odd_input_is_redacted_without_raising(odd: str, expected: str) -> None:
    assert redact_email(odd) == expected


def test_smtp_reply_keeps_everything_but_the_local_part() -> None:
    reply = "550 5.1.1 <bob@example.com>: Recipient address rejected"
    assert redact_text(reply) == "550 5.1.1 <b***@example.com>: Recipient address rejected"


def test_every_address_in_text_is_redacted() -> None:
    text = "from alice.smith+tag@mail.example.org to bob@example.com,carol@example.net."
    assert redact_text(text) == "from a***@mail.example.org to b***@example.com,c***@example.net."


def test_adjacent_addresses_do_not_leak_through_each_others_domain() -> None:
    redacted = redact_text("alice@example.com/bob@example.net")
    assert "bob" not in redacted
    assert "alice" not in redacted


def test_text_without_addresses_is_unchanged() -> None:
    text = "451 4.3.0 try again later (queue @ capacity)"
    assert redact_text(text) == text
