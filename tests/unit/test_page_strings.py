"""The link pages' words per language: every shipped language complete, overrides taken in
the email's order, and a broken override refused at start."""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from notifier.delivery.messages import Templates
from notifier.errors import ConfigError
from notifier.strings import PAGES_FILE, PageStrings

SHIPPED = resources.files("notifier").joinpath("templates")


def shipped_keys(locale: str) -> set[str]:
    parsed = tomllib.loads(SHIPPED.joinpath(locale, PAGES_FILE).read_text(encoding="utf-8"))
    return {f"{table}.{key}" for table, keys in parsed.items() for key in keys}


def shipped_languages() -> list[str]:
    return sorted(e.name for e in SHIPPED.iterdir() if e.is_dir() and e.name != "en")


@pytest.mark.parametrize("locale", shipped_languages())
def test_every_shipped_language_has_every_english_word(locale: str) -> None:
    assert shipped_keys(locale) == shipped_keys("en")


@pytest.mark.parametrize("locale", shipped_languages())
def test_no_shipped_language_leaves_a_page_text_in_english(locale: str) -> None:
    english, other = (
        PageStrings.load(None).for_locale("en"),
        PageStrings.load(None).for_locale(locale),
    )
    same = [key for key in english.texts if english.texts[key] == other.texts[key]]
    assert same == []


def test_every_shipped_language_has_words_for_the_same_email_templates() -> None:
    # A language with pages but no email (or the reverse) would answer in two languages.
    for locale in shipped_languages():
        assert SHIPPED.joinpath(locale, "body.txt").is_file(), locale


def test_a_region_takes_its_languages_words() -> None:
    strings = PageStrings.load(None)
    assert strings.for_locale("de-AT").locale == "de"
    assert strings.for_locale("fr").locale == "en"
    assert strings.for_locale("not a tag").locale == "en"


def test_a_purpose_without_a_word_is_shown_as_asked() -> None:
    german = PageStrings.load(None).for_locale("de")
    assert german.purpose("signup") == "Registrierung"
    assert german.purpose("newsletter") == "newsletter"


def test_an_override_at_the_top_changes_english_only(tmp_path: Path) -> None:
    (tmp_path / PAGES_FILE).write_text('[confirm]\nbutton = "Yes, it is me"\n')
    strings = PageStrings.load(tmp_path)
    assert strings.for_locale("en").text("confirm.button") == "Yes, it is me"
    assert strings.for_locale("de").text("confirm.button") == "Bestätigen"
    assert strings.for_locale("en").text("confirm.title") == "Confirm your email address"


def test_a_languages_override_wins_over_its_shipped_words(tmp_path: Path) -> None:
    (tmp_path / "de").mkdir()
    (tmp_path / "de" / PAGES_FILE).write_text('[purposes]\nsignup = "Anmeldung bei uns"\n')
    assert PageStrings.load(tmp_path).for_locale("de").purpose("signup") == "Anmeldung bei uns"


def test_a_new_language_borrows_english_for_what_it_leaves_out(tmp_path: Path) -> None:
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / PAGES_FILE).write_text('[confirm]\nbutton = "Confirmer"\n')
    french = PageStrings.load(tmp_path).for_locale("fr-CA")
    assert (french.locale, french.text("confirm.button")) == ("fr", "Confirmer")
    assert french.text("verified.title") == "Email verified"


def test_a_directory_holding_only_pages_words_is_a_valid_template_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / PAGES_FILE).write_text('[confirm]\nbutton = "Go"\n')
    assert Templates.load(tmp_path).strings.for_locale("en").text("confirm.button") == "Go"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('[confirm]\nbuton = "Go"\n', "confirm.buton"),
        ('[confirm]\nbutton = "Go $name"\n', "$name"),
        ('[confirm]\nbutton = "Pay $5"\n', "stray $"),
        ("[confirm]\nbutton = 5\n", "must be a string"),
        ('confirm = "Go"\n', "must be a table"),
        ("[confirm\n", "cannot read"),
    ],
)
def test_a_broken_override_is_refused_at_start_naming_the_setting(
    tmp_path: Path, content: str, said: str
) -> None:
    (tmp_path / PAGES_FILE).write_text(content)
    with pytest.raises(ConfigError) as refused:
        Templates.load(tmp_path)
    assert "NOTIFIER_TEMPLATE_DIR" in str(refused.value) and said in str(refused.value)


def test_the_readmes_pages_override_works_as_it_says(tmp_path: Path) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    [example] = re.findall(r"```toml\n(# my-templates/pages\.toml.*?)```", readme, re.DOTALL)
    (tmp_path / PAGES_FILE).write_text(example)
    strings = PageStrings.load(tmp_path)
    assert strings.for_locale("en").text("confirm.button") == "Yes, this is my address"
    assert strings.for_locale("de").text("confirm.button") == "Bestätigen"
