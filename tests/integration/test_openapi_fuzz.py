"""The HTTP API against its own OpenAPI document: generated requests, a real database.

schemathesis generates requests from the document the app serves, valid ones and invalid
ones; each is sent to the app in this test's event loop (so it shares the test's asyncpg
pool), and every response must be no server error and exactly what the document promises:
a documented status, its content type, its schema and headers. Invalid requests must be
refused with a 4xx.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import asyncpg
import httpx
import pytest
import requests
import schemathesis
from hypothesis import given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Err
from schemathesis.schemas import APIOperation
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from notifier.runner import internal_app
from notifier.storage.outbox import request_standalone
from notifier.tokens import TokenKeys
from notifier.web.api import openapi_document
from notifier.web.listeners import Services
from notifier.web.public import create_public_app
from tests.conftest import TEST_SECRET
from tests.support.apps import NO_POOL, Clients, serve
from tests.support.deliveries import policy_for_tests

pytestmark = pytest.mark.anyio

BASE_URL = "http://api.test"
# A low resend limit, so that generated requests for one user also meet 429.
RESEND_LIMIT = 3
# Generated requests per operation and generation mode: enough to cover each documented
# response, few enough that the whole module runs in seconds.
EXAMPLES_PER_OPERATION = 25

# The documents under test: the internal API's, as it serves it at /openapi.json, and the
# public listener's, which it does not serve but which describes its routes all the same (no
# database is needed to build either).
_SERVICES = Services.over(NO_POOL, policy_for_tests(TokenKeys((TEST_SECRET,))))
SCHEMAS = {
    "internal": schemathesis.openapi.from_dict(openapi_document(internal_app(_SERVICES))),
    "public": schemathesis.openapi.from_dict(create_public_app(_SERVICES).openapi()),
}
Operation = APIOperation[Any, Any, Any, Any]


def operations() -> list[tuple[str, Operation]]:
    """Every operation of both listeners; one that schemathesis cannot read is an error."""
    found = []
    for listener, schema in SCHEMAS.items():
        for result in schema.get_all_operations():
            if isinstance(result, Err):
                raise result.err()
            found.append((listener, result.ok()))
    return found


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
]


@pytest.fixture
async def apps(pool: asyncpg.Pool) -> AsyncIterator[Clients]:
    """Both listeners; the internal client sends a key with every scope."""
    keys = TokenKeys((TEST_SECRET,))
    async with serve(pool, policy_for_tests(keys, resend_limit=RESEND_LIMIT)) as clients:
        yield clients


# Stand-ins the generated requests may carry, replaced by the ids and tokens of verifications
# each test creates (one live, one expired): requests then also reach found, confirmed and
# expired responses, not only 404 and "invalid". Both are valid for the document.
KNOWN_IDS = ("00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002")
KNOWN_TOKENS = ("known-token-live", "known-token-expired")


@pytest.fixture
async def known(db: asyncpg.Connection) -> dict[str, str]:
    """Each stand-in mapped to the real id or token it stands for."""
    keys = TokenKeys((TEST_SECRET,))
    known: dict[str, str] = {}
    for user, stand_in_id, stand_in_token in zip(
        ("live", "expired"), KNOWN_IDS, KNOWN_TOKENS, strict=True
    ):
        result = await request_standalone(
            db,
            user_id=user,
            email=f"{user}@example.com",
            purpose="signup",
            policy=policy_for_tests(keys),
        )
        row = await db.fetchrow(
            "SELECT token_key_id, token_nonce FROM notifier.verifications WHERE id = $1",
            result.id,
        )
        known[stand_in_id] = str(result.id)
        known[stand_in_token] = keys.derive(
            row["token_key_id"], result.id, bytes(row["token_nonce"])
        )
    await db.execute(
        "UPDATE notifier.verifications SET expires_at = now() - interval '1 second' WHERE id = $1",
        uuid.UUID(known[KNOWN_IDS[1]]),
    )
    return known


def takes_input(operation: Operation) -> bool:
    return bool(operation.body) or any(True for _ in operation.iter_parameters())


def strategy(operation: Operation, mode: GenerationMode) -> st.SearchStrategy[Case[Operation]]:
    """Generated requests; valid ones sometimes name a known verification instead."""
    generated = operation.as_strategy(generation_mode=mode)
    if mode is GenerationMode.NEGATIVE:
        return generated
    pinned: list[st.SearchStrategy[Case[Operation]]] = []
    if "{verification_id}" in operation.path:
        pinned = [operation.as_strategy(path_parameters={"verification_id": i}) for i in KNOWN_IDS]
    elif operation.label == "GET /verify":
        pinned = [operation.as_strategy(query={"token": t}) for t in KNOWN_TOKENS]
    elif operation.label in (
        "POST /verify",
        "POST /verify/resend",
        "POST /v1/verifications/confirm",
    ):
        pinned = [operation.as_strategy(body={"token": t}) for t in KNOWN_TOKENS]
    elif operation.label == "POST /v1/verifications":
        # A deliverable address for one user: accepted, replayed, conflicting, then throttled.
        body = {"user_id": "fuzz", "email": "fuzz@example.com", "purpose": "signup"}
        pinned = [operation.as_strategy(body=body)]
    return st.one_of(generated, *pinned)


def with_known(case: Case[Operation], known: dict[str, str]) -> None:
    """Replace the stand-ins in `case` with what they stand for."""
    for values in (case.path_parameters, case.query, case.body):
        if isinstance(values, dict):
            for name, value in values.items():
                if isinstance(value, str) and value in known:
                    values[name] = known[value]


async def send(
    client: httpx.AsyncClient, case: Case[Operation], authorization: str | None
) -> httpx.Response:
    """Send `case` as schemathesis would put it on the wire (requests prepares it), with
    `authorization` in place of whatever credentials it generated (None: as generated)."""
    prepared = requests.Request(**case.as_transport_kwargs(base_url=BASE_URL)).prepare()
    assert prepared.method is not None and prepared.url is not None
    assert prepared.body is None or isinstance(prepared.body, bytes | str)
    headers = {
        name: value if isinstance(value, str) else value.decode("latin-1")
        for name, value in prepared.headers.items()
    }
    if authorization is not None:
        headers["Authorization"] = authorization
    return await client.request(
        prepared.method, prepared.url, headers=headers, content=prepared.body
    )


@pytest.mark.parametrize(
    ("listener", "operation", "mode"),
    [
        pytest.param(listener, operation, mode, id=f"{listener} {operation.label} {mode}")
        for listener, operation in operations()
        for mode in GenerationMode
        # An operation that takes no input has no invalid request to send.
        if mode is GenerationMode.POSITIVE or takes_input(operation)
    ],
)
async def test_every_response_is_documented_and_none_is_a_server_error(
    apps: Clients,
    known: dict[str, str],
    listener: str,
    operation: Operation,
    mode: GenerationMode,
) -> None:
    client = apps.internal if listener == "internal" else apps.public
    # A valid request carries a valid key; an invalid one carries what was generated (often
    # none), which the API must refuse.
    authorization = None
    if listener == "internal" and mode is GenerationMode.POSITIVE:
        authorization = f"Bearer {apps.key}"
    client.headers.pop("Authorization", None)

    # Hypothesis runs in a worker thread and sends each request back into this event loop,
    # where the app and its pool live. (Drawing inside a coroutine instead breaks anyio's
    # test runner: hypothesis stops a draw with a BaseException.)
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None)
    @given(case=strategy(operation, mode))
    def examples(case: Case[Operation]) -> None:
        with_known(case, known)
        response = anyio.from_thread.run(send, client, case, authorization)
        try:
            case.validate_response(response, checks=CHECKS)
        except FailureGroup as failures:
            # A BaseExceptionGroup, which would take anyio's test runner down with it.
            raise AssertionError(str(failures)) from None

    await anyio.to_thread.run_sync(examples)


@pytest.mark.parametrize(
    ("listener", "path"),
    [("internal", "/v1/verifications"), ("public", "/v1/verifications/confirm")],
)
async def test_a_body_that_is_not_utf8_is_refused_like_malformed_json(
    apps: Clients, listener: str, path: str
) -> None:
    # Found by the fuzzer: FastAPI answered such a body with an undocumented 400.
    client = apps.internal if listener == "internal" else apps.public
    response = await client.post(
        path,
        content=b"\xff",
        headers={"Content-Type": "application/json", "Idempotency-Key": "not-utf8"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"
