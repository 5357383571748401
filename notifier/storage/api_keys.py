"""The API keys' store: registering, listing and revoking keys (what the CLI does), and the
key ring every API request is authenticated against (what the API does), which caches a
key's record for CACHE_SECONDS. What a key is lives in notifier.apikeys.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from notifier.apikeys import (
    ApiKeyError,
    NewKey,
    Principal,
    check_name,
    check_scopes,
    generate,
    parse,
)
from notifier.return_urls import Prefix
from notifier.storage.connection import Runner
from notifier.storage.queries import sql

# How long a key's record is trusted without asking the database again: revoking a key
# takes effect within this many seconds, and a busy client costs one lookup per interval.
CACHE_SECONDS = 1.0


# -- the store: what the CLI does -------------------------------------------------------------


async def create(
    conn: Runner,
    name: str,
    scopes: Sequence[str],
    key: str | None = None,
    return_urls: Sequence[str] | None = None,
) -> NewKey:
    """Register a new key (or `key`, made elsewhere with `generate`) under `name`, narrowed
    to `return_urls` (URL prefixes within NOTIFIER_RETURN_URLS; None: all of that list).

    Registering the same `key` again with the same name is a no-op, so a deployment can
    provision its key on every start; a different key with a taken id is refused.
    """
    name, wanted = check_name(name), check_scopes(scopes)
    prefixes = check_return_urls(return_urls)
    new = parse(key) if key is not None else generate()
    row = await conn.fetchrow(
        sql("api_key_insert"), new.id, name, list(wanted), new.secret_hash, prefixes
    )
    if row is not None:
        return new
    existing = await conn.fetchrow(sql("api_key_by_id"), new.id)
    same = (
        existing is not None
        and hmac.compare_digest(bytes(existing["secret_hash"]), new.secret_hash)
        and existing["name"] == name
        and not existing["revoked"]
    )
    if not same:
        raise ApiKeyError(f"key id {new.id} is already registered to another key or name")
    if tuple(existing["scopes"]) != wanted:
        raise ApiKeyError(
            f"key {new.id} is registered with scopes {', '.join(existing['scopes'])}; "
            "revoke it and register a new key to change them"
        )
    return new


def check_return_urls(return_urls: Sequence[str] | None) -> list[str] | None:
    """`return_urls` as stored (each prefix in its plain form), or ApiKeyError."""
    if return_urls is None:
        return None
    try:
        return [str(Prefix.parse(p)) for p in return_urls]
    except ValueError as exc:
        raise ApiKeyError(f"--return-url: {exc}") from None


async def set_return_urls(conn: Runner, key_id: str, return_urls: Sequence[str] | None) -> None:
    """Narrow `key_id` to `return_urls` (None: NOTIFIER_RETURN_URLS as it is again)."""
    prefixes = check_return_urls(return_urls)
    if await conn.fetchval(sql("api_key_return_urls"), key_id.strip(), prefixes) is None:
        raise ApiKeyError(f"no key has the id {key_id!r}")


async def listing(conn: Runner) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(sql("api_keys"))]


async def revoke(conn: Runner, key_id: str) -> datetime:
    row = await conn.fetchrow(sql("api_key_revoke"), key_id.strip())
    if row is None:
        raise ApiKeyError(f"no key has the id {key_id!r}")
    return row["revoked_at"]  # type: ignore[no-any-return]


# -- the ring: what the API does on every request ---------------------------------------------


@dataclass(slots=True)
class _Cached:
    principal: Principal | None  # None: unknown or revoked
    secret_hash: bytes | None
    fetched_at: float
    # Epoch seconds before which this key's browser sessions were signed out (None: never).
    sessions_valid_after: float | None = None
    # Sessions of this key signed out one by one: when each was issued (epoch ms).
    signed_out: frozenset[int] = frozenset()


class KeyRing:
    """Authenticates presented keys against the database, caching each for CACHE_SECONDS.

    Also remembers when each key was last used; `flush_usage` writes that in one batch.
    """

    def __init__(self, pool: Runner, cache_seconds: float = CACHE_SECONDS) -> None:
        self.pool = pool
        self.cache_seconds = cache_seconds
        self._cache: dict[str, _Cached] = {}
        self._used: dict[str, datetime] = {}

    async def authenticate(self, presented: str) -> Principal | None:
        """The principal `presented` proves, or None (malformed, unknown, revoked, wrong)."""
        try:
            key = parse(presented)
        except ApiKeyError:
            return None
        cached = self._cache.get(key.id)
        now = time.monotonic()
        if cached is None or now - cached.fetched_at >= self.cache_seconds:
            cached = await self._fetch(key.id, now)
        if cached.principal is None or cached.secret_hash is None:
            return None
        # The id picks the row; the hash comparison, in constant time, proves the secret.
        if not hmac.compare_digest(cached.secret_hash, key.secret_hash):
            return None
        self._used[key.id] = datetime.now(UTC)
        return cached.principal

    async def session_principal(self, key_id: str, issued_at: float) -> Principal | None:
        """The live principal of a browser session: its key (sessions hold the id, not the
        key), unless the key was revoked or signed out of since `issued_at`."""
        cached = self._cache.get(key_id)
        now = time.monotonic()
        if cached is None or now - cached.fetched_at >= self.cache_seconds:
            cached = await self._fetch(key_id, now)
        if cached.principal is None:
            return None
        if cached.sessions_valid_after is not None and issued_at <= cached.sessions_valid_after:
            return None
        if round(issued_at * 1000) in cached.signed_out:
            return None
        self._used[key_id] = datetime.now(UTC)
        return cached.principal

    async def sign_out(self, key_id: str, issued_at: float, expires_at: float) -> None:
        """Void the one session of `key_id` issued at `issued_at` (epoch seconds), until it
        would have expired anyway; the key's other sessions (colleagues signed in with the
        same key) go on."""
        await self.pool.execute(
            sql("session_sign_out"), key_id, round(issued_at * 1000), expires_at
        )
        self._cache.pop(key_id, None)

    async def _fetch(self, key_id: str, now: float) -> _Cached:
        row = await self.pool.fetchrow(sql("api_key_by_id"), key_id)
        if row is None or row["revoked"]:
            entry = _Cached(None, None, now)
        else:
            urls = row["return_urls"]
            principal = Principal(
                row["id"],
                row["name"],
                frozenset(row["scopes"]),
                None if urls is None else tuple(urls),
            )
            entry = _Cached(
                principal,
                bytes(row["secret_hash"]),
                now,
                row["sessions_valid_after"],
                frozenset(row["signed_out"]),
            )
        if len(self._cache) > MAX_CACHED_KEYS:
            # Unknown ids cost an entry each; an attacker spraying ids must not grow memory.
            self._cache.clear()
        self._cache[key_id] = entry
        return entry

    async def flush_usage(self) -> None:
        """Write when each key was last used since the previous flush."""
        if not self._used:
            return
        used, self._used = self._used, {}
        await self.pool.execute(sql("api_keys_used"), list(used), list(used.values()))


MAX_CACHED_KEYS = 10_000
