"""API keys and browser sessions: their shape, and what is refused."""

from __future__ import annotations

import pytest

from notifier import apikeys
from notifier.tokens import TokenKeys
from notifier.web.access import SESSION_SECONDS, Sessions

SECRET = "s" * 40


def test_a_key_has_a_prefix_an_id_and_256_random_bits() -> None:
    new = apikeys.generate()
    prefix, key_id, secret = new.key[:4], new.key[4:16], new.key[17:]
    assert (prefix, new.key[16]) == ("nfk_", "_")
    assert key_id == new.id and int(key_id, 16) >= 0
    assert len(secret) == 43  # 32 bytes, base64url
    assert apikeys.generate().key != new.key


def test_a_key_is_parsed_back_to_its_id_and_hash() -> None:
    new = apikeys.generate()
    assert apikeys.parse(f"  {new.key}\n") == new


@pytest.mark.parametrize(
    "near_miss",
    [
        "",
        "nfk_",
        "NFK_0123456789ab_" + "a" * 43,
        "nfk_0123456789AB_" + "a" * 43,
        "nfk_0123456789ab_" + "a" * 42,
        "nfk_0123456789ab-" + "a" * 43,
        "nfk_0123456789ab_" + "a" * 42 + "!",
    ],
)
def test_anything_not_shaped_like_a_key_is_refused(near_miss: str) -> None:
    with pytest.raises(apikeys.ApiKeyError):
        apikeys.parse(near_miss)


def test_scopes_are_validated_and_ordered() -> None:
    assert apikeys.check_scopes(["metrics", "request", "metrics"]) == ("request", "metrics")
    for bad in ([], ["root"], ["request", "Read"]):
        with pytest.raises(apikeys.ApiKeyError):
            apikeys.check_scopes(bad)


def test_a_session_names_its_key_until_it_expires() -> None:
    sessions = Sessions(TokenKeys((SECRET,)))
    cookie = sessions.issue("0123456789ab", now=1000.0)
    assert sessions.key_id(cookie, now=1000.0 + SESSION_SECONDS - 1) == "0123456789ab"
    assert sessions.key_id(cookie, now=1000.0 + SESSION_SECONDS + 1) is None


def test_a_session_signed_under_another_secret_is_refused() -> None:
    cookie = Sessions(TokenKeys(("o" * 40,))).issue("0123456789ab")
    assert Sessions(TokenKeys((SECRET,))).key_id(cookie) is None


def test_a_session_survives_a_secret_rotation_while_the_old_secret_is_kept() -> None:
    cookie = Sessions(TokenKeys((SECRET,))).issue("0123456789ab")
    assert Sessions(TokenKeys(("n" * 40, SECRET))).key_id(cookie) == "0123456789ab"


@pytest.mark.parametrize("mangle", [lambda c: c + "x", lambda c: "f" + c[1:], lambda c: c[:-1]])
def test_a_tampered_session_is_refused(mangle: object) -> None:
    sessions = Sessions(TokenKeys((SECRET,)))
    cookie = sessions.issue("0123456789ab")
    assert callable(mangle)
    assert sessions.key_id(mangle(cookie)) is None
