"""A code's face: how it is grouped for reading and how a typed code is read back."""

from __future__ import annotations

import pytest

from notifier.codes import MAX_INPUT_CHARS, grouped, normalize


@pytest.mark.parametrize(
    ("code", "shown"),
    [
        ("123456", "123 456"),
        ("1234567", "123 4567"),
        ("12345678", "1234 5678"),
        ("123456789", "123 456 789"),
        ("1234567890", "123 456 7890"),
    ],
)
def test_a_code_is_grouped_for_reading(code: str, shown: str) -> None:
    assert grouped(code) == shown
    assert normalize(shown) == code


@pytest.mark.parametrize(
    "typed",
    [
        "123456",
        " 123 456 ",
        "123-456",
        "123\u2013456",
        "\uff11\uff12\uff13\uff14\uff15\uff16",
        "123\u00a0456",
    ],
)
def test_spaces_dashes_and_full_width_digits_are_read_as_the_code(typed: str) -> None:
    assert normalize(typed) == "123456"


def test_anything_else_is_kept_so_a_wrong_code_stays_wrong() -> None:
    assert normalize("12345a") == "12345a"
    assert normalize("123.456") == "123.456"


def test_a_long_input_is_read_only_as_far_as_a_code_could_go() -> None:
    assert len(normalize("1" * 1_000_000)) == MAX_INPUT_CHARS
