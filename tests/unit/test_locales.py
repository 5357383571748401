"""Locale tags: normalised to one spelling, and looked up from specific to general."""

from __future__ import annotations

import pytest

from notifier.locales import closest, fallbacks, normalize_locale


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("de", "de"),
        ("DE", "de"),
        ("pt_br", "pt-BR"),
        ("zh-hant-tw", "zh-Hant-TW"),
        ("es-419", "es-419"),
    ],
)
def test_tags_are_normalised_to_one_spelling(raw: str, normal: str) -> None:
    assert normalize_locale(raw) == normal


@pytest.mark.parametrize("raw", ["", "d", "deutsch", "de DE", "de-", "../etc", "de\n", "x" * 36])
def test_anything_not_shaped_like_a_tag_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="language tag"):
        normalize_locale(raw)


def test_lookup_goes_from_the_whole_tag_to_its_language_to_english() -> None:
    assert fallbacks("zh-Hant-TW") == ("zh-Hant-TW", "zh-Hant", "zh", "en")
    assert fallbacks("en-GB") == ("en-GB", "en")
    assert fallbacks(None) == ("en",)


def test_the_closest_available_language_is_the_first_fallback_held() -> None:
    available = {"en", "de", "pt-BR"}
    assert closest("de-AT", available) == "de"
    assert closest("pt-BR", available) == "pt-BR"
    assert closest("fr", available) == "en"
    assert closest("not a tag", available) == "en"
    assert closest(None, available) == "en"
