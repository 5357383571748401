"""Who may call what: API keys and scopes on the internal API, nothing but links on the public.

Routes are enumerated from the apps themselves, so a route added later is covered (or the
enumeration tests fail) without anyone remembering to list it here.
"""

from __future__ import annotations

import inspect
import re
import uuid
from typing import Any

import anyio
import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant

from notifier import apikeys
from notifier.runner import internal_app
from notifier.storage import api_keys
from notifier.tokens import TokenKeys
from notifier.web.access import SESSION_COOKIE, ScopedRoute
from notifier.web.access import routes as access_routes
from notifier.web.listeners import Services
from notifier.web.public import create_public_app
from tests.conftest import TEST_SECRET
from tests.support.apps import NO_POOL, Clients, bearer, make_key
from tests.support.deliveries import policy_for_tests

pytestmark = pytest.mark.anyio

OPEN_INTERNAL = {
    ("GET", "/favicon.ico"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/sign-in"),
    # Authenticates by the key in its form; refuses a bad one with 401.
    ("POST", "/sign-in"),
    ("POST", "/sign-out"),
}
PUBLIC = {
    ("GET", "/verify"),
    ("POST", "/verify"),
    ("POST", "/verify/resend"),
    ("POST", "/v1/verifications/confirm"),
    # Proves itself with SNS's signature over a topic NOTIFIER_SES_TOPICS names.
    ("POST", "/inbound/ses"),
    ("GET", "/favicon.ico"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
}
SUPPRESSED = "suppressed@example.com"
REQUEST_BODY = {"user_id": "attacker", "email": "victim@example.com", "purpose": "signup"}
_PATH_VALUES = {
    "verification_id": str(uuid.uuid4()),
    "email": SUPPRESSED,
    "name": "swagger-ui-bundle.js",
    "endpoint_id": str(uuid.uuid4()),
    "delivery_id": "1",
}


def _app(build: Any) -> FastAPI:
    app: FastAPI = build(Services.over(NO_POOL, policy_for_tests(TokenKeys((TEST_SECRET,)))))
    return app


def routes(app: FastAPI) -> list[tuple[str, str, ScopedRoute]]:
    """Every (method, path template, route) the app answers."""
    found = []
    for route in access_routes(app):
        assert isinstance(route, ScopedRoute), f"{route!r} is not access-checked"
        found += [(method, route.path, route) for method in sorted(route.methods or ())]
    return found


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: _PATH_VALUES[m.group(1)], path)


GUARDED = [
    (method, path, route.access)
    for method, path, route in routes(_app(internal_app))
    if (method, path) not in OPEN_INTERNAL
]


def test_every_internal_route_but_the_probes_and_sign_in_needs_a_scope() -> None:
    declared = {(m, p): r.access for m, p, r in routes(_app(internal_app))}
    assert {k for k, v in declared.items() if v == "open"} == OPEN_INTERNAL
    assert {"request", "read", "admin", "metrics"} == {v for v in declared.values() if v != "open"}


def test_the_public_app_serves_exactly_the_link_routes() -> None:
    assert {(m, p) for m, p, _ in routes(_app(create_public_app))} == PUBLIC


def _blocking_calls(dependant: Dependant) -> list[str]:
    """The handler and dependencies FastAPI would run in its thread pool (plain functions)."""
    calls = [] if dependant.call is None or _is_async(dependant.call) else [repr(dependant.call)]
    for dependency in dependant.dependencies:
        calls += _blocking_calls(dependency)
    return calls


def _is_async(call: Any) -> bool:
    return inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call)


@pytest.mark.parametrize("build", [internal_app, create_public_app])
def test_no_route_hands_its_handler_or_dependencies_to_a_thread(build: Any) -> None:
    # Each hand-off to FastAPI's thread pool and back cost a request about 0.4 ms of CPU.
    blocking = [
        f"{method} {path}: {call}"
        for method, path, route in routes(_app(build))
        for call in _blocking_calls(route.dependant)
    ]
    assert blocking == []


@pytest.fixture
def apps(apps: Clients) -> Clients:
    """The shared apps, but the internal client carries no key: each test presents its own."""
    apps.internal.headers.pop("Authorization")
    return apps


async def writes(db: asyncpg.Connection) -> tuple[Any, ...]:
    """Everything a refused request must leave as it was."""
    return (
        await db.fetchval("SELECT count(*) FROM notifier.verifications"),
        await db.fetchval("SELECT count(*) FROM notifier.email_outbox"),
        await db.fetchval(
            "SELECT array_agg(email ORDER BY email) FROM notifier.suppressed_addresses"
        ),
        await db.fetchval("SELECT count(*) FROM notifier.api_keys WHERE last_used_at IS NOT NULL"),
        await db.fetchval("SELECT count(*) FROM notifier.webhook_endpoints"),
    )


async def call(
    client: httpx.AsyncClient, method: str, path: str, headers: dict[str, str]
) -> httpx.Response:
    """A request that would write, were it let through."""
    if method != "POST":
        return await client.request(method, concrete(path), headers=headers)
    extra = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    return await client.request(
        method, concrete(path), headers={**headers, **extra}, json=REQUEST_BODY
    )


async def revoked_key(db: asyncpg.Connection) -> str:
    key = await make_key(db)
    await api_keys.revoke(db, apikeys.parse(key).id)
    return key


CREDENTIALS = {
    "missing": lambda db: None,
    "malformed": lambda db: "not-a-key",
    "unknown": lambda db: apikeys.generate().key,
    "revoked": revoked_key,
}


@pytest.mark.parametrize("credential", sorted(CREDENTIALS))
async def test_every_guarded_route_refuses_a_bad_key_with_401_and_writes_nothing(
    apps: Clients, db: asyncpg.Connection, credential: str
) -> None:
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason) VALUES ($1, '550 gone')",
        SUPPRESSED,
    )
    made = CREDENTIALS[credential](db)
    key = await made if not isinstance(made, str | None) else made
    headers = {} if key is None else bearer(key)
    before = await writes(db)
    for method, path, _ in GUARDED:
        response = await call(apps.internal, method, path, headers)
        assert response.status_code == 401, (method, path, response.text)
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.json()["error"]["code"] == "unauthorized"
    assert await writes(db) == before


async def test_every_guarded_route_refuses_a_key_without_its_scope_with_403(
    apps: Clients, db: asyncpg.Connection
) -> None:
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason) VALUES ($1, '550 gone')",
        SUPPRESSED,
    )
    for method, path, needed in GUARDED:
        others = [s for s in apikeys.SCOPES if s != needed]
        key = await make_key(db, others, name=f"all but {needed}")
        before = await writes(db)
        response = await call(apps.internal, method, path, bearer(key))
        assert response.status_code == 403, (method, path, response.text)
        assert f'scope="{needed}"' in response.headers["WWW-Authenticate"]
        assert (await writes(db))[:3] == before[:3]
        assert (await writes(db))[4] == before[4]


@pytest.mark.parametrize(
    "authorization",
    ["Basic dXNlcjpwYXNz", "Bearer", "Bearer  ", "Token {key}", "Bearer {key}x", "Bearer {KEY}"],
)
async def test_a_near_miss_credential_is_refused(
    apps: Clients, db: asyncpg.Connection, authorization: str
) -> None:
    key = await make_key(db)
    header = authorization.replace("{key}", key).replace("{KEY}", key.upper())
    response = await apps.internal.get("/v1/suppressions", headers={"Authorization": header})
    assert response.status_code == 401


async def test_the_bearer_scheme_is_case_insensitive(apps: Clients, db: asyncpg.Connection) -> None:
    key = await make_key(db)
    response = await apps.internal.get(
        "/v1/suppressions", headers={"Authorization": f"bEaReR {key}"}
    )
    assert response.status_code == 200


async def test_a_revoked_key_stops_working_within_a_second(
    apps: Clients, db: asyncpg.Connection
) -> None:
    key = await make_key(db)
    assert (await apps.internal.get("/v1/suppressions", headers=bearer(key))).status_code == 200
    await api_keys.revoke(db, apikeys.parse(key).id)
    # The bound the operator is promised, not a wait for something to happen.
    await anyio.sleep(api_keys.CACHE_SECONDS)
    assert (await apps.internal.get("/v1/suppressions", headers=bearer(key))).status_code == 401


async def test_two_clients_reusing_one_idempotency_key_get_two_verifications(
    apps: Clients, db: asyncpg.Connection
) -> None:
    first, second = await make_key(db, ["request"]), await make_key(db, ["request"])
    answers = []
    for key in (first, second, first):
        answers.append(
            await apps.internal.post(
                "/v1/verifications",
                json={"user_id": "ada", "email": "ada@example.com"},
                headers={**bearer(key), "Idempotency-Key": "signup-ada-1"},
            )
        )
    assert [a.status_code for a in answers] == [202, 202, 202]
    ids = [a.json()["id"] for a in answers]
    assert ids[0] != ids[1] and ids[2] == ids[0]
    assert answers[2].headers["Idempotent-Replayed"] == "true"
    clients = await db.fetch("SELECT client_id FROM notifier.verifications ORDER BY created_at")
    assert [r["client_id"] for r in clients] == [apikeys.parse(k).id for k in (first, second)]


async def test_a_keys_last_use_is_recorded(apps: Clients, db: asyncpg.Connection) -> None:
    key = await make_key(db, ["read"])
    await apps.internal.get(f"/v1/verifications/{uuid.uuid4()}", headers=bearer(key))
    await apps.services.keyring.flush_usage()
    used = await db.fetchval(
        "SELECT last_used_at FROM notifier.api_keys WHERE id = $1", apikeys.parse(key).id
    )
    assert used is not None


async def test_suppressions_are_listed_and_cleared_with_the_admin_scope(
    apps: Clients, db: asyncpg.Connection
) -> None:
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason) VALUES ($1, '550 gone')",
        SUPPRESSED,
    )
    headers = bearer(await make_key(db, ["admin"]))
    listed = (await apps.internal.get("/v1/suppressions", headers=headers)).json()
    cleared = await apps.internal.delete(f"/v1/suppressions/{SUPPRESSED}", headers=headers)
    again = await apps.internal.delete(f"/v1/suppressions/{SUPPRESSED}", headers=headers)
    assert [s["email"] for s in listed["suppressions"]] == [SUPPRESSED]
    assert (cleared.status_code, again.status_code) == (204, 404)


async def test_the_docs_load_their_assets_from_this_server_not_a_cdn(
    apps: Clients, db: asyncpg.Connection
) -> None:
    headers = bearer(await make_key(db, ["read"]))
    page = await apps.internal.get("/docs", headers=headers)
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(a.startswith("/") for a in assets), assets
    for asset in assets:
        response = await apps.internal.get(asset, headers=headers)
        assert response.status_code == 200 and len(response.content) > 1000, asset
    document = (await apps.internal.get("/openapi.json", headers=headers)).json()
    assert document["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"


# -- a browser's session ------------------------------------------------------------------------


async def sign_in(apps: Clients, key: str, next_path: str = "/docs") -> httpx.Response:
    return await apps.internal.post("/sign-in", data={"key": key, "next": next_path})


async def test_signing_in_sets_a_strict_http_only_session_cookie(
    apps: Clients, db: asyncpg.Connection
) -> None:
    response = await sign_in(apps, await make_key(db, ["read"]))
    assert response.status_code == 303 and response.headers["Location"] == "/docs"
    cookie = response.headers["Set-Cookie"].lower()
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert "httponly" in cookie and "samesite=strict" in cookie


async def test_a_session_reads_but_cannot_write_without_a_pages_csrf_token(
    apps: Clients, db: asyncpg.Connection
) -> None:
    await sign_in(apps, await make_key(db))
    assert (await apps.internal.get("/docs")).status_code == 200
    posted = await apps.internal.post(
        "/v1/verifications", json=REQUEST_BODY, headers={"Idempotency-Key": "csrf"}
    )
    assert posted.status_code == 403 and posted.json()["error"]["code"] == "csrf_failed"
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 0


async def test_revoking_the_key_ends_its_sessions(apps: Clients, db: asyncpg.Connection) -> None:
    key = await make_key(db, ["read"])
    await sign_in(apps, key)
    await api_keys.revoke(db, apikeys.parse(key).id)
    await anyio.sleep(api_keys.CACHE_SECONDS)
    assert (await apps.internal.get("/docs")).status_code == 401


async def test_a_tampered_session_is_refused(apps: Clients, db: asyncpg.Connection) -> None:
    reader = apikeys.parse(await make_key(db, ["read"]))
    admin = apikeys.parse(await make_key(db, ["admin"]))
    await sign_in(apps, reader.key)
    issued = apps.internal.cookies[SESSION_COOKIE]
    # The same signature over another key's id.
    apps.internal.cookies.clear()
    apps.internal.cookies.set(SESSION_COOKIE, issued.replace(reader.id, admin.id))
    assert (await apps.internal.get("/v1/suppressions")).status_code == 401


async def test_signing_in_with_a_bad_key_is_refused(apps: Clients) -> None:
    response = await sign_in(apps, apikeys.generate().key)
    assert response.status_code == 401 and SESSION_COOKIE not in response.headers.get(
        "Set-Cookie", ""
    )


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/", "/\\evil.example"])
async def test_signing_in_never_redirects_to_another_site(
    apps: Clients, db: asyncpg.Connection, target: str
) -> None:
    response = await sign_in(apps, await make_key(db, ["read"]), target)
    assert response.headers["Location"] == "/console"


async def test_signing_in_from_another_site_is_refused(
    apps: Clients, db: asyncpg.Connection
) -> None:
    response = await apps.internal.post(
        "/sign-in",
        data={"key": await make_key(db, ["read"]), "next": "/docs"},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403 and "Set-Cookie" not in response.headers


async def test_both_listeners_serve_the_favicon_without_a_key(apps: Clients) -> None:
    for client in (apps.internal, apps.public):
        icon = await client.get("/favicon.ico", headers={"Authorization": ""})
        assert icon.status_code == 200, client.base_url
        assert icon.headers["content-type"] == "image/x-icon"
        assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO file's header
