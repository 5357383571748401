"""API keys: how a client of the internal API proves who it is and what it may do.

A key reads `nfk_<id>_<secret>`: a recognisable prefix (so secret scanners and people can
tell it apart), a 12-hex-digit public id (shown in listings, logs and as the client of the
requests it makes) and 256 random bits of secret. The database keeps the SHA-256 of the
whole key, never the key: a dump lets nobody call the API.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from notifier.errors import NotifierError

Scope = Literal["request", "read", "admin", "metrics"]
SCOPES: tuple[Scope, ...] = get_args(Scope)
SCOPE_MEANINGS: dict[Scope, str] = {
    "request": "request verification emails (POST /v1/verifications)",
    "read": "read delivery status and attempt timelines, and the API docs",
    "admin": "list and clear suppressions",
    "metrics": "scrape /metrics",
}

PREFIX = "nfk_"
ID_HEX_CHARS = 12
SECRET_BYTES = 32
_KEY = re.compile(rf"{PREFIX}(?P<id>[0-9a-f]{{{ID_HEX_CHARS}}})_(?P<secret>[A-Za-z0-9_-]{{43}})")
NAME_MAX_CHARS = 100


class ApiKeyError(NotifierError):
    """A key cannot be created, found or revoked as asked."""


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just made: `key` is shown once and never stored."""

    id: str
    key: str
    secret_hash: bytes


@dataclass(frozen=True, slots=True)
class Principal:
    """A client the API has authenticated: which key, and what it may do."""

    key_id: str
    name: str
    scopes: frozenset[str]
    # Its own narrowing of NOTIFIER_RETURN_URLS (None: that list as it is).
    return_urls: tuple[str, ...] | None = None

    def may(self, scope: Scope) -> bool:
        return scope in self.scopes


def generate() -> NewKey:
    """A fresh random key."""
    key_id = secrets.token_hex(ID_HEX_CHARS // 2)
    key = f"{PREFIX}{key_id}_{secrets.token_urlsafe(SECRET_BYTES)}"
    return NewKey(key_id, key, hash_key(key))


def parse(key: str) -> NewKey:
    """A key as presented; ApiKeyError if it is not shaped like one of ours."""
    # Only the whitespace a copy and paste adds; str.strip() would also eat control and
    # separator characters, accepting keys nobody issued.
    match = _KEY.fullmatch(key.strip(" \t\r\n"))
    if match is None:
        raise ApiKeyError(
            f"not a notifier API key (expected {PREFIX}<12 hex digits>_<43 characters>)"
        )
    return NewKey(match["id"], match.group(0), hash_key(match.group(0)))


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode("ascii", errors="replace")).digest()


def check_scopes(requested: Sequence[str]) -> tuple[Scope, ...]:
    """The scopes asked for, validated and deduplicated in a stable order."""
    unknown = sorted(set(requested) - set(SCOPES))
    if unknown or not requested:
        raise ApiKeyError(
            f"scopes must be one or more of {', '.join(SCOPES)}"
            + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )
    return tuple(s for s in SCOPES if s in requested)


def check_name(name: str) -> str:
    if not 1 <= len(name) <= NAME_MAX_CHARS or not name.isprintable():
        raise ApiKeyError(f"a key's name must be 1 to {NAME_MAX_CHARS} printable characters")
    return name
