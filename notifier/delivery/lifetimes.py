"""How long the email says its link lasts: the configured lifetime, rounded for a reader,
and worded in the email's language."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Literal

from babel import Locale, UnknownLocaleError
from babel.units import format_unit

from notifier.locales import DEFAULT_LOCALE

# A send this much later than the request still states the link's whole lifetime: a queue or
# a first retry costs seconds, and "59 minutes" for an hour-long link only confuses. A later
# send (a retry after an outage) states what is left instead, so it never promises much more
# time than the link has.
LATE_SEND_SLACK_SECONDS = 120.0
# Rounding up to the minute tolerates this much, so 60.3 s of lifetime is "1 minute".
ROUNDING_TOLERANCE_SECONDS = 0.6
MINUTES_PER_HOUR = 60
MINUTES_PER_DAY = 24 * 60

Unit = Literal["minute", "hour", "day"]


@dataclass(frozen=True, slots=True)
class Lifetime:
    """A link's lifetime as the email states it: whole minutes, and an amount of one unit."""

    minutes: int
    amount: int
    unit: Unit

    def words(self, locale: str) -> str:
        """ "60 minutes", "1 minute", "24 Stunden": CLDR's plural rules for the language."""
        return _words(self.amount, self.unit, locale)


def stated_lifetime(expires_at: datetime, now: datetime, issued_at: datetime | None) -> Lifetime:
    """What to tell the reader about a link that expires at `expires_at`, sent at `now`.

    `issued_at` is when the verification was created (the database's clock, like
    `expires_at`, so their difference is the configured lifetime exactly, whatever the
    sending machine's clock says). Unknown, or long before `now`: the time left is stated.
    """
    remaining = (expires_at - now).total_seconds()
    seconds = remaining
    if issued_at is not None:
        lifetime = (expires_at - issued_at).total_seconds()
        if remaining >= lifetime - LATE_SEND_SLACK_SECONDS:
            seconds = lifetime
    return rounded(seconds)


def rounded(seconds: float) -> Lifetime:
    """Up to the whole minute (at least one); from two hours on, whole hours, and from two
    days on, whole days, rounded down unless exact, so no long wait is overstated."""
    minutes = max(1, math.ceil((seconds - ROUNDING_TOLERANCE_SECONDS) / 60))
    if minutes >= 2 * MINUTES_PER_DAY:
        return Lifetime(minutes, _whole(minutes, seconds, MINUTES_PER_DAY), "day")
    if minutes >= 2 * MINUTES_PER_HOUR:
        return Lifetime(minutes, _whole(minutes, seconds, MINUTES_PER_HOUR), "hour")
    return Lifetime(minutes, minutes, "minute")


def _whole(minutes: int, seconds: float, unit_minutes: int) -> int:
    if minutes % unit_minutes == 0:
        return minutes // unit_minutes
    return int(seconds // (unit_minutes * 60))


def prepare(locale: str) -> None:
    """Load the language's CLDR data now: the first wording would otherwise load it (a
    tenth of a second or more), in the middle of the first email a process sends."""
    for unit in ("minute", "hour", "day"):
        _words(1, unit, locale)


@lru_cache(maxsize=1024)
def _words(amount: int, unit: Unit, locale: str) -> str:
    return format_unit(amount, f"duration-{unit}", length="long", locale=_babel_locale(locale))


@lru_cache(maxsize=128)
def _babel_locale(tag: str) -> Locale:
    """CLDR data for `tag`, else its language's, else English (an override directory may be
    named for a language CLDR does not know; its words then fall back, its text does not)."""
    for candidate in (tag, tag.split("-")[0], DEFAULT_LOCALE):
        try:
            return Locale.parse(candidate, sep="-")
        except (UnknownLocaleError, ValueError):
            continue
    raise AssertionError("CLDR always knows English")
