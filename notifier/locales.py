"""Locale tags: the one a request names, checked and normalised, and the fallbacks it has."""

from __future__ import annotations

import re
from collections.abc import Container

# The language of the shipped templates, and of every lookup that finds nothing closer.
DEFAULT_LOCALE = "en"
# RFC 5646 recommends supporting tags up to this long.
LOCALE_MAX_CHARS = 35
# A language (2 or 3 letters) and subtags (script, region, variant); '_' is accepted as a
# separator too, since gettext-style names (pt_BR) are what many apps hold.
LOCALE_PATTERN = r"^[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*$"
_LOCALE = re.compile(LOCALE_PATTERN)


def normalize_locale(raw: str) -> str:
    """The tag in its canonical case with '-' separators ("pt_br" -> "pt-BR").

    Raises ValueError for anything that is not shaped like a language tag.
    """
    if not isinstance(raw, str) or len(raw) > LOCALE_MAX_CHARS or not _LOCALE.fullmatch(raw):
        raise ValueError(
            "must be a language tag such as en, de or pt-BR "
            f"(letters, digits and '-', at most {LOCALE_MAX_CHARS} characters)"
        )
    language, *subtags = re.split("[-_]", raw)
    parts = [language.lower()]
    for subtag in subtags:
        if len(subtag) == 4 and subtag.isalpha():
            parts.append(subtag.title())  # script: Latn
        elif (len(subtag) == 2 and subtag.isalpha()) or (len(subtag) == 3 and subtag.isdigit()):
            parts.append(subtag.upper())  # region: BR, 419
        else:
            parts.append(subtag.lower())
    return "-".join(parts)


def fallbacks(tag: str | None) -> tuple[str, ...]:
    """The tags to try for `tag`, most specific first, ending with DEFAULT_LOCALE.

    RFC 4647 lookup: "pt-Latn-BR" tries pt-Latn-BR, pt-Latn, pt, then en.
    """
    chain: list[str] = []
    if tag:
        parts = normalize_locale(tag).split("-")
        chain = ["-".join(parts[:n]) for n in range(len(parts), 0, -1)]
    if DEFAULT_LOCALE not in chain:
        chain.append(DEFAULT_LOCALE)
    return tuple(chain)


def closest(tag: str | None, available: Container[str]) -> str:
    """The first of `tag`'s fallbacks that `available` holds (de-AT: de-AT, then de, then
    en); a tag not shaped like one falls back as no tag does. `available` holds
    DEFAULT_LOCALE."""
    try:
        chain = fallbacks(tag)
    except ValueError:
        chain = fallbacks(None)
    return next(candidate for candidate in chain if candidate in available)
