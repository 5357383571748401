"""Both HTTP apps over a real pool, as in-process clients, and API keys to call them with."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import httpx

from notifier import apikeys
from notifier.runner import internal_app
from notifier.storage import api_keys
from notifier.storage.connection import Pool
from notifier.verifications import Policy
from notifier.web.listeners import Services
from notifier.web.public import create_public_app

INTERNAL_BASE = "http://api.test"
# For an app built only to look at its routes or its document: no request reaches a pool.
NO_POOL = cast(Pool, None)
PUBLIC_BASE = "http://links.test"


async def make_key(
    conn: Any, scopes: Sequence[str] = apikeys.SCOPES, name: str = "test client"
) -> str:
    """A new API key with `scopes`, registered in the database behind `conn`."""
    return (await api_keys.create(conn, name, scopes)).key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class Clients:
    """The internal API (sending `key` unless a request says otherwise) and the public pages."""

    internal: httpx.AsyncClient
    public: httpx.AsyncClient
    key: str
    services: Services


@asynccontextmanager
async def serve(pool: Any, policy: Policy, key: str | None = None) -> AsyncIterator[Clients]:
    """Both apps over `pool`; `key` defaults to a new key with every scope."""
    if key is None:
        async with pool.acquire() as conn:
            key = await make_key(conn)
    services = Services.over(pool, policy)
    internal = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=internal_app(services)),
        base_url=INTERNAL_BASE,
        headers=bearer(key),
    )
    public = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_public_app(services)), base_url=PUBLIC_BASE
    )
    async with internal, public:
        yield Clients(internal, public, key, services)
