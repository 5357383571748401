"""Verification tokens: derived from a server secret and per-row data, never stored.

A token is "<key id>.<HMAC-SHA256(secret, context || verification id || nonce)>", URL-safe,
256 bits of MAC. The database keeps the nonce and a SHA-256 of the token: with a dump alone
nobody can produce a link, and the worker re-derives the same token at send time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass

from notifier.errors import NotifierError

NONCE_BYTES = 32
# Binds the MAC to this use, so the secret could serve another purpose without collisions.
_CONTEXT = b"notifier.verification-token.v1\x00"
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

    def _digest(self, kid: str, context: bytes, data: bytes) -> bytes:
        return hmac.new(self._by_id[kid], context + b"\x00" + data, hashlib.sha256).digest()

    def _mac(self, kid: str, context: bytes, data: bytes) -> str:
        digest = self._digest(kid, context, data)
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
