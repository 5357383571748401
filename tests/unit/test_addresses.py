"""Addresses: what is accepted, the canonical mailbox limits count, the envelope form."""

from __future__ import annotations

import pytest

from notifier import addresses
from notifier.addresses import InvalidAddress


@pytest.mark.parametrize(
    ("given", "mailbox"),
    [
        ("victim@EXAMPLE.com", "victim@example.com"),
        ("Victim@example.com", "victim@example.com"),
        ("vIctim+1@example.com", "victim@example.com"),
        ("victim+a+b@example.com", "victim@example.com"),
        ("+tag@example.com", "+tag@example.com"),  # no mailbox before the tag: kept whole
        ("user@Bücher.de", "user@xn--bcher-kva.de"),
    ],
)
def test_the_canonical_mailbox_ignores_case_tags_and_the_domains_script(
    given: str, mailbox: str
) -> None:
    assert addresses.parse(given).mailbox == mailbox


@pytest.mark.parametrize(
    ("given", "mailbox"),
    [
        ("Ada.Lovelace@gmail.com", "adalovelace@gmail.com"),
        ("a.d.a.lovelace+news@googlemail.com", "adalovelace@gmail.com"),
        ("ada.lovelace@outlook.com", "ada.lovelace@outlook.com"),  # Outlook reads dots
    ],
)
def test_the_canonical_mailbox_follows_the_providers_own_rules(given: str, mailbox: str) -> None:
    assert addresses.parse(given).mailbox == mailbox


def test_a_googlemail_address_counts_for_the_gmail_domain() -> None:
    assert addresses.parse("ada@googlemail.com").domain == "gmail.com"


@pytest.mark.parametrize(
    ("given", "key"),
    [
        ("Alice+X@Corp.example", "alice+x@corp.example"),
        ("Ada.Lovelace@gmail.com", "ada.lovelace@gmail.com"),  # not the mailbox: what was sent
        ("user@Bücher.de", "user@xn--bcher-kva.de"),
        ("jösé@Bücher.de", "jösé@xn--bcher-kva.de"),
    ],
)
def test_a_suppression_key_is_the_address_itself_lowercased(given: str, key: str) -> None:
    assert addresses.parse(given).folded == key
    # The worker finds the same key from the stored address.
    assert addresses.folded(addresses.parse(given).display) == key


def test_an_addresss_spellings_are_what_a_server_may_echo_longest_first() -> None:
    assert addresses.spellings("Ada+news@Bücher.de") == [
        "Ada+news@xn--bcher-kva.de",
        "Ada+news@Bücher.de",
        "Ada+news",
        "Ada",
    ]


def test_a_short_local_part_is_not_a_spelling_of_its_own() -> None:
    assert addresses.spellings("al@example.com") == ["al@example.com"]


def test_other_separators_can_be_configured() -> None:
    assert addresses.parse("ada-news@example.com", "+-").mailbox == "ada@example.com"
    assert addresses.parse("ada-news@example.com", "").mailbox == "ada-news@example.com"


def test_the_address_is_kept_as_typed_for_sending() -> None:
    parsed = addresses.parse("Ada+News@EXAMPLE.com")
    assert parsed.display == "Ada+News@example.com"


@pytest.mark.parametrize("local", ["a" * 65, "é" * 33])  # 65 octets, 66 octets
def test_a_local_part_over_64_octets_is_refused(local: str) -> None:
    with pytest.raises(InvalidAddress, match="64"):
        addresses.parse(f"{local}@example.com")


def test_a_local_part_of_64_octets_is_accepted() -> None:
    assert addresses.parse("a" * 64 + "@example.com").display.startswith("a" * 64)


@pytest.mark.parametrize(
    ("stored", "envelope", "needs_utf8"),
    [
        ("user@bücher.de", "user@xn--bcher-kva.de", False),
        ("user@example.com", "user@example.com", False),
        ("jösé@example.com", "jösé@example.com", True),
    ],
)
def test_the_envelope_uses_punycode_so_only_a_non_ascii_local_part_needs_smtputf8(
    stored: str, envelope: str, needs_utf8: bool
) -> None:
    assert addresses.envelope_recipient(stored) == (envelope, needs_utf8)
