"""Tokens: derived, not stored; rotatable; URL-safe; 256 bits of MAC."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from notifier.tokens import TokenKeys, UnknownKeyError, hash_token, key_id, looks_like_token

OLD = "old-secret-" + "a" * 32
NEW = "new-secret-" + "b" * 32


def test_the_worker_derives_the_same_token_that_was_issued() -> None:
    keys = TokenKeys((NEW,))
    verification_id = uuid.uuid4()
    issued = keys.issue(verification_id)
    assert keys.derive(issued.key_id, verification_id, issued.nonce) == issued.token
    assert hash_token(issued.token) == issued.token_hash


def test_token_is_url_safe_and_carries_its_key_id() -> None:
    issued = TokenKeys((NEW,)).issue(uuid.uuid4())
    assert looks_like_token(issued.token)
    assert issued.token.startswith(key_id(NEW) + ".")
    assert all(c.isalnum() or c in "._-" for c in issued.token)


def test_tokens_differ_per_row_even_for_the_same_verification() -> None:
    keys = TokenKeys((NEW,))
    verification_id = uuid.uuid4()
    assert keys.issue(verification_id).token != keys.issue(verification_id).token


def test_rotated_secret_still_derives_links_issued_under_the_old_one() -> None:
    verification_id = uuid.uuid4()
    issued = TokenKeys((OLD,)).issue(verification_id)
    rotated = TokenKeys((NEW, OLD))
    assert rotated.current_key_id == key_id(NEW)
    assert rotated.derive(issued.key_id, verification_id, issued.nonce) == issued.token


def test_a_secret_dropped_from_the_configuration_cannot_derive() -> None:
    verification_id = uuid.uuid4()
    issued = TokenKeys((OLD,)).issue(verification_id)
    with pytest.raises(UnknownKeyError):
        TokenKeys((NEW,)).derive(issued.key_id, verification_id, issued.nonce)


def test_the_stored_nonce_and_hash_alone_do_not_give_the_token() -> None:
    verification_id = uuid.uuid4()
    issued = TokenKeys((NEW,)).issue(verification_id)
    other_secret = TokenKeys(("attacker-guess-" + "c" * 32,))
    with pytest.raises(UnknownKeyError):
        other_secret.derive(issued.key_id, verification_id, issued.nonce)
    assert issued.token.encode() not in issued.nonce + issued.token_hash


@pytest.mark.parametrize(
    "candidate",
    ["", "abc", "zzzzzzzz." + "a" * 43, "0123abcd." + "a" * 42, "0123abcd." + "a" * 42 + "!"],
)
def test_malformed_tokens_are_recognised_before_any_lookup(candidate: str) -> None:
    assert not looks_like_token(candidate)


# -- codes ---------------------------------------------------------------------------------------


def test_a_code_is_derived_again_the_same_from_the_secret_and_the_nonce() -> None:
    keys = TokenKeys(("s" * 40,))
    vid, nonce = uuid.uuid4(), b"n" * 32
    code = keys.code(keys.current_key_id, vid, nonce, 6)
    assert code == keys.code(keys.current_key_id, vid, nonce, 6)
    assert len(code) == 6 and code.isdigit()


def test_codes_of_other_verifications_or_secrets_differ() -> None:
    keys, other = TokenKeys(("s" * 40,)), TokenKeys(("t" * 40,))
    nonce = b"n" * 32
    codes = {keys.code(keys.current_key_id, uuid.uuid4(), nonce, 10) for _ in range(50)}
    assert len(codes) == 50
    vid = uuid.uuid4()
    assert keys.code(keys.current_key_id, vid, nonce, 10) != other.code(
        other.current_key_id, vid, nonce, 10
    )


def test_a_code_keeps_its_leading_zeros() -> None:
    keys = TokenKeys(("s" * 40,))
    lengths = {len(keys.code(keys.current_key_id, uuid.uuid4(), b"n" * 32, 6)) for _ in range(300)}
    assert lengths == {6}


def test_a_codes_stored_hash_is_keyed_and_bound_to_its_verification() -> None:
    keys = TokenKeys(("s" * 40,))
    vid = uuid.uuid4()
    stored = keys.code_hash(keys.current_key_id, vid, "123456")
    assert stored != hashlib.sha256(b"123456").digest()
    assert stored != keys.code_hash(keys.current_key_id, uuid.uuid4(), "123456")
    assert (keys.current_key_id, stored) in keys.code_hashes(vid, "123456")


def test_a_code_is_hashed_under_every_configured_secret() -> None:
    keys = TokenKeys(("s" * 40, "t" * 40))
    assert [kid for kid, _ in keys.code_hashes(uuid.uuid4(), "1")] == list(
        keys.key_ids_newest_first
    )
