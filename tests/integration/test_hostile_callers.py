"""What a hostile caller tries against the trust boundaries, beyond a missing or wrong key.

Each test here is one attack that got through when it was written: a replayed session, an
ambiguous pair of credentials, a runtime role the upgrade path forgot.
"""

from __future__ import annotations

import asyncpg
import pytest

from notifier.web.access import CSRF_FIELD, SESSION_COOKIE
from tests.support.apps import Clients, make_key
from tests.support.databases import unique_name

pytestmark = pytest.mark.anyio


@pytest.fixture
def apps(apps: Clients) -> Clients:
    """The shared apps, but the internal client carries no key: each test presents its own."""
    apps.internal.headers.pop("Authorization")
    return apps


async def test_a_session_cookie_is_refused_after_signing_out(
    apps: Clients, db: asyncpg.Connection
) -> None:
    signed_in = await apps.internal.post(
        "/sign-in", data={"key": await make_key(db, ["admin", "read"]), "next": "/docs"}
    )
    assert signed_in.status_code == 303
    cookie = apps.internal.cookies[SESSION_COOKIE]
    csrf = apps.services.sessions.csrf_token(cookie)
    assert (await apps.internal.post("/sign-out", data={CSRF_FIELD: csrf})).status_code == 303
    # Whoever copied the cookie (a shared machine, a proxy log, a browser profile) sends it
    # again: signing out must have ended the session, not only the browser's copy of it.
    apps.internal.cookies.clear()
    apps.internal.cookies.set(SESSION_COOKIE, cookie)
    assert (await apps.internal.get("/v1/suppressions")).status_code == 401


@pytest.mark.parametrize("order", ["valid first", "valid last"])
async def test_a_request_with_two_authorization_headers_is_refused(
    apps: Clients, db: asyncpg.Connection, order: str
) -> None:
    # A proxy or WAF in front may read the other one; one request must name one client.
    valid = f"Bearer {await make_key(db, ['admin'])}"
    other = f"Bearer {await make_key(db, ['read'])}"
    pair = [valid, other] if order == "valid first" else [other, valid]
    response = await apps.internal.get(
        "/v1/suppressions", headers=[("Authorization", pair[0]), ("Authorization", pair[1])]
    )
    assert response.status_code in (400, 401), response.text


async def test_a_dropped_runtime_role_does_not_break_the_next_regrant(
    db: asyncpg.Connection,
) -> None:
    """0007 records every role `notifier grants` was given, and prescribes that a later
    migration end with `SELECT notifier.grant_runtime_v1(role) FROM notifier.runtime_roles`.
    An operator who retires a runtime role (DROP OWNED, DROP ROLE) leaves its name recorded;
    the next upgrade must still apply."""
    kept, retired = unique_name("runtime_kept"), unique_name("runtime_retired")
    for role in (kept, retired):
        await db.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        for role in (kept, retired):
            await db.execute("SELECT notifier.grant_runtime_v1($1)", role)
        await db.execute(f'DROP OWNED BY "{retired}"')
        await db.execute(f'DROP ROLE "{retired}"')
        async with db.transaction():
            await db.execute("SELECT notifier.grant_runtime_v1(role) FROM notifier.runtime_roles")
        granted = "SELECT has_table_privilege($1, 'notifier.verifications', 'INSERT')"
        assert await db.fetchval(granted, kept)
    finally:
        await db.execute(f'DROP OWNED BY "{kept}"')
        await db.execute(f'DROP ROLE "{kept}"')
        await db.execute(f'DROP ROLE IF EXISTS "{retired}"')
