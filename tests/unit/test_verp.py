"""A delivery's own return path: made under the token secret, recognised under any of its
secrets, and nothing else recognised."""

from __future__ import annotations

import time

import pytest

from notifier import verp
from notifier.tokens import TokenKeys

KEYS = TokenKeys(("s" * 40,))
DOMAIN = "bounces.example.com"


def test_a_return_path_names_its_delivery() -> None:
    address = verp.return_path(KEYS, 4711, DOMAIN)
    assert address.startswith("bounce+4711.") and address.endswith("@" + DOMAIN)
    assert verp.outbox_of(KEYS, address, DOMAIN) == 4711


def test_a_relay_that_changes_its_case_or_brackets_it_still_names_it() -> None:
    address = verp.return_path(KEYS, 12, DOMAIN)
    assert verp.outbox_of(KEYS, f"<{address.upper()}>", DOMAIN) == 12


@pytest.mark.parametrize(
    "forged",
    [
        "bounce+4711.0000000000000000@" + DOMAIN,  # a MAC nobody made
        "bounce+4712.{mac}@" + DOMAIN,  # another delivery's id under this one's MAC
        "bounce+4711.{mac}@elsewhere.example.com",  # another domain
        "postmaster@" + DOMAIN,
        "bounce+04711.{mac}@" + DOMAIN,
        "",
    ],
)
def test_a_return_path_notifier_did_not_make_names_nothing(forged: str) -> None:
    mac = verp.return_path(KEYS, 4711, DOMAIN).split(".")[1].split("@")[0]
    assert verp.outbox_of(KEYS, forged.format(mac=mac), DOMAIN) is None


def test_a_return_path_made_before_a_rotation_is_recognised_while_its_secret_is_kept() -> None:
    address = verp.return_path(KEYS, 7, DOMAIN)
    rotated = TokenKeys(("n" * 40, "s" * 40))
    assert verp.outbox_of(rotated, address, DOMAIN) == 7
    assert verp.outbox_of(TokenKeys(("n" * 40,)), address, DOMAIN) is None


def test_a_huge_address_is_refused_in_linear_time() -> None:
    started = time.perf_counter()
    assert verp.outbox_of(KEYS, "bounce+" + "1" * 1_000_000 + "@" + DOMAIN, DOMAIN) is None
    assert time.perf_counter() - started < 1.0
