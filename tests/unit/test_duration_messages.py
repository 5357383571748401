"""A bad duration setting says its range in human units and, for "1h", the seconds to write."""

from __future__ import annotations

import pytest

from notifier.config import TokenSettings
from notifier.errors import ConfigError
from notifier.settings_spec import read, spec_of
from notifier.settings_values import human_duration

# A duration from 60 s to 30 days.
MONTH = spec_of(TokenSettings, "ttl_seconds")


def _message(raw: str) -> str:
    with pytest.raises(ConfigError) as caught:
        read(MONTH, {MONTH.name: raw}, 3600.0)
    return str(caught.value)


def test_a_duration_with_a_unit_is_answered_with_the_seconds_to_write() -> None:
    assert "write 3600 for 1h" in _message("1h")


@pytest.mark.parametrize(("raw", "meant"), [("30m", "1800"), ("2d", "172800"), ("1.5h", "5400")])
def test_each_unit_converts_to_seconds(raw: str, meant: str) -> None:
    assert f"write {meant} for {raw}" in _message(raw)


def test_an_out_of_range_duration_reads_as_a_human_range() -> None:
    message = _message("5")
    assert "from 1 minute to 30 days" in message
    assert "e+" not in message


def test_text_that_is_no_duration_gets_the_range_without_a_conversion() -> None:
    message = _message("soon")
    assert "from 1 minute to 30 days" in message
    assert "write" not in message


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.5, "0.5 s"), (90, "90 s"), (120, "2 minutes"), (3600, "1 hour"), (172800, "2 days")],
)
def test_durations_are_shown_in_the_largest_whole_unit(value: float, shown: str) -> None:
    assert human_duration(value) == shown
