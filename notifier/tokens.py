"""Verification tokens and codes: derived from a server secret and per-row data, never stored.

A token is "<key id>.<HMAC-SHA256(secret, context || verification id || nonce)>", URL-safe,
256 bits of MAC. The database keeps the nonce and a SHA-256 of the token: with a dump alone
nobody can produce a link, and the worker re-derives the same token at send time. A code
is derived from the same secret and nonce in a context of its own; the database keeps only
its HMAC under that secret (a plain hash of six digits is undone by trying a million). What a
configured secret must be to serve as one (length, no example value, enough entropy) is
decided here too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
import uuid
from collections import Counter
from dataclasses import dataclass

from notifier.errors import NotifierError

NONCE_BYTES = 32
# Binds the MAC to this use, so the secret could serve another purpose without collisions.
_CONTEXT = b"notifier.verification-token.v1\x00"
# The code's own contexts: one derives it, the other hashes it for storage.
_CODE_CONTEXT = b"notifier.verification-code.v1\x00"
_CODE_HASH_CONTEXT = b"notifier.verification-code-hash.v1"
_KEY_ID_HEX_CHARS = 8
_MAC_CHARS = 43  # 32 bytes in unpadded URL-safe base64


class UnknownKeyError(NotifierError):
    """A token names a key id that is no longer configured (rotated out)."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"token key {key_id!r} is not among NOTIFIER_TOKEN_SECRET's secrets")
        self.key_id = key_id


def key_id(secret: str) -> str:
    """A short public name for a secret, so a token says which secret it was made with."""
    return hashlib.sha256(b"notifier.key-id\x00" + secret.encode()).hexdigest()[:_KEY_ID_HEX_CHARS]


def hash_token(token: str) -> bytes:
    """What the database stores in place of the token."""
    return hashlib.sha256(token.encode("ascii", errors="replace")).digest()


def looks_like_token(token: str) -> bool:
    """A cheap shape check before any lookup: key id, a dot, the URL-safe MAC."""
    kid, dot, mac = token.partition(".")
    return (
        dot == "."
        and len(kid) == _KEY_ID_HEX_CHARS
        and all(c in "0123456789abcdef" for c in kid)
        and len(mac) == _MAC_CHARS
        and all(c.isalnum() or c in "-_" for c in mac)
    )


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A freshly made token and what the database keeps of it."""

    key_id: str
    nonce: bytes
    token: str
    token_hash: bytes


class TokenKeys:
    """The configured secrets, newest first; issues tokens with the newest, derives with any."""

    def __init__(self, secrets_newest_first: tuple[str, ...]) -> None:
        if not secrets_newest_first:
            raise ValueError("at least one secret is required")
        self._by_id = {key_id(s): s.encode() for s in secrets_newest_first}
        self.current_key_id = key_id(secrets_newest_first[0])
        self.key_ids_newest_first = tuple(self._by_id)

    def knows(self, token: str) -> bool:
        """Whether `token` was made with a secret still configured: removing a secret from
        NOTIFIER_TOKEN_SECRET revokes every link made with it."""
        return token.partition(".")[0] in self._by_id

    def issue(self, verification_id: uuid.UUID) -> IssuedToken:
        nonce = secrets.token_bytes(NONCE_BYTES)
        token = self.derive(self.current_key_id, verification_id, nonce)
        return IssuedToken(self.current_key_id, nonce, token, hash_token(token))

    def derive(self, kid: str, verification_id: uuid.UUID, nonce: bytes) -> str:
        secret = self._by_id.get(kid)
        if secret is None:
            raise UnknownKeyError(kid)
        mac = hmac.new(secret, _CONTEXT + verification_id.bytes + nonce, hashlib.sha256).digest()
        return f"{kid}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"

    def code(self, kid: str, verification_id: uuid.UUID, nonce: bytes, digits: int) -> str:
        """The verification's code: `digits` decimal digits derived like its token (same
        secret, same nonce) in a context of its own, so neither tells anything of the other
        and the worker re-derives it at send time. 64 bits of MAC reduced modulo 10**digits:
        the bias is below one in 10**8 for ten digits."""
        secret = self._by_id.get(kid)
        if secret is None:
            raise UnknownKeyError(kid)
        mac = hmac.new(secret, _CODE_CONTEXT + verification_id.bytes + nonce, hashlib.sha256)
        return str(int.from_bytes(mac.digest()[:8], "big") % 10**digits).zfill(digits)

    def code_hashes(self, verification_id: uuid.UUID, code: str) -> list[tuple[str, bytes]]:
        """A code's keyed hash under every configured secret, with its key id: what a
        submitted code is compared by (the verification's key id picks one). The hash is
        bound to the verification, so one code's hash says nothing of another's."""
        data = verification_id.bytes + _code_bytes(code)
        return [(kid, self._digest(kid, _CODE_HASH_CONTEXT, data)) for kid in self._by_id]

    def code_hash(self, kid: str, verification_id: uuid.UUID, code: str) -> bytes:
        """What the database keeps of a code: its keyed hash under secret `kid`."""
        if kid not in self._by_id:
            raise UnknownKeyError(kid)
        return self._digest(kid, _CODE_HASH_CONTEXT, verification_id.bytes + _code_bytes(code))

    def sign(self, context: bytes, data: bytes) -> str:
        """`<key id>.<MAC>` of `data` for one `context`, under the newest secret.

        For things the server hands out and must recognise later (a console session), never
        for verification tokens, whose MAC is bound to its own context.
        """
        return f"{self.current_key_id}.{self._mac(self.current_key_id, context, data)}"

    def verify(self, context: bytes, data: bytes, signature: str) -> bool:
        """Whether `signature` is `sign(context, data)` under any configured secret."""
        kid, _, mac = signature.partition(".")
        if kid not in self._by_id:
            return False
        return hmac.compare_digest(self._mac(kid, context, data), mac)

    def digest(self, context: bytes, data: bytes) -> bytes:
        """A keyed hash of `data` for one `context`, under the newest secret: what is stored
        in place of something derived from an address or a client's key, so that a dump of
        the table cannot be checked against guesses."""
        return self._digest(self.current_key_id, context, data)

    def digests(self, context: bytes, data: bytes) -> list[bytes]:
        """`digest(context, data)` under every configured secret: what a value stored before
        a rotation may be, while its secret is kept."""
        return [self._digest(kid, context, data) for kid in self._by_id]

    def derived_key(self, kid: str, context: bytes, data: bytes) -> bytes:
        """A secret of its own for one `context` and `data` (a webhook endpoint's signing
        key, a client's return secret), derived from secret `kid`: it can be handed out
        without revealing the secret, and a dump of what it was derived from cannot make
        it. UnknownKeyError once `kid` is no longer configured."""
        if kid not in self._by_id:
            raise UnknownKeyError(kid)
        return self._digest(kid, context, data)

    def _digest(self, kid: str, context: bytes, data: bytes) -> bytes:
        return hmac.new(self._by_id[kid], context + b"\x00" + data, hashlib.sha256).digest()

    def _mac(self, kid: str, context: bytes, data: bytes) -> str:
        digest = self._digest(kid, context, data)
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _code_bytes(code: str) -> bytes:
    # Whatever was typed is hashed (and is then wrong like any wrong code), lone surrogates
    # a JSON body may carry included.
    return code.encode("utf-8", "surrogatepass")


# -- what a configured secret must be ---------------------------------------------------------

# Shorter secrets make the HMAC key guessable offline from a single leaked link.
MIN_SECRET_LENGTH = 32
# Bits a secret must carry by a per-character entropy estimate. The estimate undercounts
# short random strings (32 hex digits, 128 real bits, score about 112); a repeated
# character or a word with a counter appended scores far less.
MIN_SECRET_BITS = 100
# Words that mark a value copied from an example (this repository's compose file and
# Kubernetes Secret among them) rather than generated.
_PLACEHOLDER_WORDS = ("change-me", "changeme", "change_me", "example", "placeholder", "demo")
GENERATE_HINT = 'generate one with: python3 -c "import secrets; print(secrets.token_urlsafe(32))"'


def secret_list(raw: str) -> tuple[str, ...]:
    secrets = tuple(s.strip() for s in raw.split(",") if s.strip())
    if any(len(s) < MIN_SECRET_LENGTH for s in secrets):
        raise ValueError(f"each secret must be at least {MIN_SECRET_LENGTH} characters")
    return secrets


def strong_secret_list(raw: str) -> tuple[str, ...]:
    """`secret_list`, refusing values copied from examples and values too regular to be
    random; `notifier dev` alone accepts any (and makes its own when none is given)."""
    secrets = secret_list(raw)
    for position, secret in enumerate(secrets, 1):
        which = f"secret {position}" if len(secrets) > 1 else "the secret"
        lowered = secret.lower()
        if any(word in lowered for word in _PLACEHOLDER_WORDS):
            raise ValueError(f"{which} is an example value, not a secret; {GENERATE_HINT}")
        if estimated_bits(secret) < MIN_SECRET_BITS:
            raise ValueError(f"{which} is too regular to be random; {GENERATE_HINT}")
    return secrets


def estimated_bits(secret: str) -> float:
    """Shannon entropy of the characters, times the length: a rough upper bound on how
    much guessing the secret takes (exact for independent random characters)."""
    counts = Counter(secret)
    return -sum(n * math.log2(n / len(secret)) for n in counts.values())
