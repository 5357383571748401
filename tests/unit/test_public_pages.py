"""The pages a link opens, as HTML: in the reader's language, naming the product and the
address (redacted), escaped, light and dark; and the sign-in form's pointer to a key."""

from __future__ import annotations

import pytest

from notifier.strings import PageStrings
from notifier.web import pages
from notifier.web.pages import Reader

STRINGS = PageStrings.load(None)
HOSTILE = '<script>alert("x")</script>'


def reader(locale: str = "en", **fields: str) -> Reader:
    return Reader(
        STRINGS.for_locale(locale),
        fields.get("product_name", "Acme"),
        fields.get("email", "ada@example.com"),
        fields.get("purpose", "signup"),
    )


def every_link_page(who: Reader) -> dict[str, str]:
    return {
        "confirm": pages.confirm_page(who, "k1.t"),
        "verified": pages.verified_page(who),
        "already_verified": pages.already_verified_page(who),
        "expired": pages.expired_page(who, "k1.t"),
        "invalid": pages.invalid_page(who),
        "superseded": pages.invalid_page(who, superseded=True),
        "resent": pages.resent_page(who),
        "refused": pages.resend_refused_page(who),
        "too_old": pages.too_old_page(who),
    }


@pytest.mark.parametrize("locale", ["en", "de"])
def test_every_link_page_speaks_its_readers_language(locale: str) -> None:
    for name, page in every_link_page(reader(locale)).items():
        assert page.startswith(f"<!doctype html><html lang={locale}><head>"), name


def test_the_german_pages_carry_no_english_words() -> None:
    english = every_link_page(reader("en"))
    for name, page in every_link_page(reader("de")).items():
        heading = english[name].split("<h1")[1].split("</h1>")[0]
        assert heading not in page, name


def test_the_confirm_page_names_the_product_and_the_address_redacted() -> None:
    page = pages.confirm_page(reader(), "k1.t")
    assert "Press the button to confirm a***@example.com for Acme." in page
    assert "ada@example.com" not in page
    assert (
        "<p class=product>Acme</p>" in page and "<title>Confirm your email address · Acme" in page
    )


def test_the_footer_names_the_purpose_in_the_readers_words() -> None:
    assert "(Registrierung)" in pages.verified_page(reader("de"))
    assert "(sign-up)" in pages.verified_page(reader("en"))


def test_a_hostile_product_name_address_or_purpose_is_escaped() -> None:
    page = pages.confirm_page(
        reader(product_name=HOSTILE, email=f"{HOSTILE}@example.com", purpose=HOSTILE), "k1.t"
    )
    assert "<script" not in page
    assert "&lt;script&gt;" in page


@pytest.mark.parametrize("name", list(every_link_page(reader())))
def test_every_link_page_follows_the_readers_light_or_dark_scheme(name: str) -> None:
    page = every_link_page(reader())[name]
    assert '<meta name=color-scheme content="light dark">' in page
    assert "@media (prefers-color-scheme:dark)" in page


def test_on_a_phone_the_card_keeps_a_margin() -> None:
    page = pages.confirm_page(reader(), "k1.t")
    assert "padding:1rem" in page.split("body{")[1].split("}")[0]


def test_the_sign_in_form_points_to_notifier_devs_key_file_under_dev() -> None:
    page = pages.sign_in_page("/console", key_file=".notifier/dev-api-key")
    assert "<code>cat .notifier/dev-api-key</code>" in page
    assert "notifier keys create" not in page


def test_the_sign_in_form_says_how_to_make_a_key_outside_dev() -> None:
    assert "<code>notifier keys create</code>" in pages.sign_in_page("/console")
