"""The lifetime an email states: the configured one, rounded for a reader, in its language."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from notifier.delivery.lifetimes import rounded, stated_lifetime

ISSUED = datetime(2025, 6, 1, 11, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "minutes", "amount", "unit"),
    [
        (60, 1, 1, "minute"),
        (59.2, 1, 1, "minute"),
        (0, 1, 1, "minute"),
        (-30, 1, 1, "minute"),
        (90, 2, 2, "minute"),
        (3600, 60, 60, "minute"),
        (3599.5, 60, 60, "minute"),
        (7200, 120, 2, "hour"),
        (86400, 1440, 24, "hour"),
        (9000, 150, 2, "hour"),  # 2.5 h: whole hours, rounded down
        (7 * 86400, 10080, 7, "day"),
        (7 * 86400 - 3 * 3600, 9900, 6, "day"),
    ],
)
def test_rounding(seconds: float, minutes: int, amount: int, unit: str) -> None:
    lifetime = rounded(seconds)
    assert (lifetime.minutes, lifetime.amount, lifetime.unit) == (minutes, amount, unit)


def test_the_whole_lifetime_is_stated_for_a_send_within_two_minutes_of_the_request() -> None:
    expires = ISSUED + timedelta(hours=1)
    assert stated_lifetime(expires, ISSUED + timedelta(seconds=119), ISSUED).minutes == 60


def test_the_time_left_is_stated_for_a_later_send() -> None:
    expires = ISSUED + timedelta(hours=1)
    assert stated_lifetime(expires, ISSUED + timedelta(minutes=10), ISSUED).minutes == 50


def test_a_sending_clock_ahead_of_the_database_does_not_shrink_the_stated_lifetime() -> None:
    # Issued and expiry times come from the database; the worker's clock runs 40 s fast.
    expires = ISSUED + timedelta(hours=1)
    assert stated_lifetime(expires, ISSUED + timedelta(seconds=40), ISSUED).minutes == 60


@pytest.mark.parametrize(
    ("seconds", "locale", "words"),
    [
        (60, "en", "1 minute"),
        (3600, "en", "60 minutes"),
        (60, "de", "1 Minute"),
        (3600, "de", "60 Minuten"),
        (86400, "de", "24 Stunden"),
        (7 * 86400, "en", "7 days"),
        (3600, "pt-BR", "60 minutos"),
        (3600, "tlh", "60 minutes"),  # a language CLDR does not know: English words
    ],
)
def test_words_follow_the_languages_plural_rules(seconds: float, locale: str, words: str) -> None:
    assert rounded(seconds).words(locale) == words
