"""The internal HTTP API: request verifications, read their delivery, scrape metrics, docs,
sign in. The delivery console (notifier.web.console) is mounted beside it by the
composition root.

It listens on NOTIFIER_API_HOST/PORT, which must never face the internet: every route but
the probes and the sign-in form needs an API key with the route's scope (notifier.web.access).
The pages an emailed link opens are served by the public listener (notifier.web.public).
"""

from __future__ import annotations

import uuid
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Form, Header, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from notifier.redact import redact_email
from notifier.storage import suppressions
from notifier.storage.connection import Runner
from notifier.storage.outbox import request_standalone
from notifier.storage.queries import sql
from notifier.verifications import VerificationResult
from notifier.web import pages
from notifier.web.access import (
    CSRF_FIELD,
    HOME_PATH,
    SECURITY_SCHEME,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Authentication,
    ScopedRoute,
    access,
    local_path,
    principal_of,
    same_site,
    sign_in_response,
    trusted_caller,
)
from notifier.web.api_models import (
    Attempts,
    LatestVerification,
    Suppression,
    Suppressions,
    VerificationAccepted,
    VerificationIn,
    VerificationStatus,
)
from notifier.web.attempts import attempts_of
from notifier.web.listeners import (
    BODY_TIMEOUT_SECONDS,
    MAX_BODY_BYTES,
    Conn,
    NotFound,
    Services,
    Svc,
    errors,
    json_errors,
    listener_app,
    probes,
    require_json,
)
from notifier.web.responses import OrjsonResponse, html

_SWAGGER_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon.png": "image/png",
}


def create_internal_app(
    services: Services,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    body_timeout: float = BODY_TIMEOUT_SECONDS,
) -> FastAPI:
    """The internal ASGI app over shared `services` (whose pool the caller owns): the API,
    its documents, metrics, sign-in and the probes. The composition root mounts the console
    on it (notifier.web.console.routes.mount)."""
    app = listener_app(
        "notifier",
        services,
        description="Email-verification delivery over a PostgreSQL outbox. Every operation "
        "but the probes needs an API key (`Authorization: Bearer nfk_...`) with the scope its "
        "`x-notifier-access` names.",
        max_body_bytes=max_body_bytes,
        body_timeout=body_timeout,
        # A caller's trace is continued only once it proved who it is.
        trust_incoming=trusted_caller,
    )
    # Outermost: who is calling, before their span and the body's bounds.
    app.add_middleware(Authentication)
    for router in (verifications, suppression_routes, operations, sign_in_routes):
        app.include_router(router)
    app.include_router(probes)
    return app


verifications = APIRouter(prefix="/v1/verifications", route_class=ScopedRoute)


@verifications.post(
    "",
    status_code=202,
    response_model=VerificationAccepted,
    responses=errors(401, 403, 409, 413, 415, 422, 429, 503),
    dependencies=[Depends(require_json)],
    summary="Request a verification email",
    **access("request"),
)
async def create_verification(
    request: Request,
    body: VerificationIn,
    conn: Conn,
    svc: Svc,
    idempotency_key: Annotated[
        str,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=255,
            pattern=r"^[\x21-\x7e]+$",
            description="Makes retries safe: the same key and body replay the request "
            "(its current status), another body with it is 409. Scoped to the API key.",
        ),
    ],
) -> Any:
    caller = principal_of(request.scope)
    result: VerificationResult = await request_standalone(
        conn,
        user_id=body.user_id,
        email=body.email,
        purpose=body.purpose,
        idempotency_key=idempotency_key,
        policy=svc.policy,
        client_id=caller.key_id if caller is not None else None,
        locale=body.locale,
    )
    return OrjsonResponse(
        VerificationAccepted(
            id=result.id, status=result.status, expires_at=result.expires_at
        ).model_dump(mode="json"),
        status_code=202,
        headers={"Idempotent-Replayed": "true"} if result.replayed else None,
    )


@verifications.get(
    "/{verification_id}",
    response_model=VerificationStatus,
    responses=errors(401, 403, 404, 422, 503),
    summary="A verification's delivery status",
    **access("read"),
)
async def get_verification(verification_id: uuid.UUID, conn: Conn) -> VerificationStatus:
    row = await _status_row(conn, verification_id)
    return VerificationStatus(
        id=row["id"],
        user_id=row["user_id"],
        status=row["status"],
        purpose=row["purpose"],
        email=redact_email(row["email"]),
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        verified=row["verified_at"] is not None,
        verified_at=row["verified_at"],
        superseded=row["superseded_at"] is not None,
        superseded_by=row["superseded_by"],
        latest=LatestVerification(
            id=row["latest_id"],
            status=row["latest_status"],
            verified=row["latest_verified_at"] is not None,
            verified_at=row["latest_verified_at"],
            expires_at=row["latest_expires_at"],
        ),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        next_attempt_at=row["next_attempt_at"] if row["status"] == "pending" else None,
        completed_at=row["completed_at"],
        last_outcome=row["last_outcome"],
        last_error=row["last_error"],
    )


@verifications.get(
    "/{verification_id}/attempts",
    response_model=Attempts,
    responses=errors(401, 403, 404, 422, 503),
    summary="A verification's delivery attempts, oldest first (for support staff)",
    **access("read"),
)
async def get_attempts(verification_id: uuid.UUID, conn: Conn) -> Attempts:
    await _status_row(conn, verification_id)  # 404 for an unknown id, not an empty list
    return Attempts(
        verification_id=verification_id, attempts=await attempts_of(conn, verification_id)
    )


async def _status_row(conn: Runner, verification_id: uuid.UUID) -> Any:
    row = await conn.fetchrow(sql("verification_status"), verification_id)
    if row is None:
        raise NotFound
    return row


suppression_routes = APIRouter(prefix="/v1/suppressions", route_class=ScopedRoute)


@suppression_routes.get(
    "",
    response_model=Suppressions,
    responses=errors(401, 403, 503),
    summary="Addresses no mail is sent to, newest first",
    **access("admin"),
)
async def list_suppressions(conn: Conn) -> Suppressions:
    return Suppressions(
        suppressions=[
            Suppression(
                email=entry.address,
                reason=entry.reason,
                smtp_code=entry.smtp_code,
                suppressed_at=entry.suppressed_at,
                expires_at=entry.expires_at,
            )
            for entry in await suppressions.active(conn)
        ]
    )


@suppression_routes.delete(
    "/{email}",
    status_code=204,
    responses=errors(401, 403, 404, 422, 503),
    summary="Clear a mailbox (any spelling of it): requests for it are accepted again",
    **access("admin"),
)
async def clear_suppression(email: str, conn: Conn, svc: Svc) -> Response:
    separators = svc.policy.limits.subaddress_separators
    if await suppressions.clear(conn, email, separators) is None:
        raise NotFound("that address is not suppressed")
    return Response(status_code=204)


# Metrics for Prometheus, and the API's own documentation, served without a CDN.
operations = APIRouter(route_class=ScopedRoute)


@operations.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses=json_errors(401, 403),
    summary="Prometheus text: queue health, outcomes, latencies",
    **access("metrics"),
)
async def metrics_text() -> PlainTextResponse:
    return PlainTextResponse(generate_latest(), media_type=CONTENT_TYPE_LATEST)


@operations.get("/openapi.json", include_in_schema=False, **access("read"))
async def openapi_json(request: Request) -> OrjsonResponse:
    return OrjsonResponse(openapi_document(request.app))


@operations.get("/docs", include_in_schema=False, **access("read"))
async def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="notifier API",
        swagger_js_url="/docs/assets/swagger-ui-bundle.js",
        swagger_css_url="/docs/assets/swagger-ui.css",
        swagger_favicon_url="/docs/assets/favicon.png",
    )


@operations.get("/docs/assets/{name}", include_in_schema=False, **access("read"))
async def docs_asset(name: str) -> Response:
    media_type = _SWAGGER_ASSETS.get(name)
    if media_type is None:
        raise NotFound("no such asset")
    body = resources.files("fastapi_offline").joinpath("static", name).read_bytes()
    return Response(body, media_type=media_type, headers={"Cache-Control": "max-age=86400"})


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with the bearer-key scheme that its routes' `security` names."""
    if app.openapi_schema is None:
        document = app.openapi()
        document.setdefault("components", {})["securitySchemes"] = {
            SECURITY_SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key from `notifier keys create NAME --scope ...`.",
            }
        }
        app.openapi_schema = document
    return app.openapi_schema


# A browser's way in: a key pasted into a form becomes a session cookie for reading.
sign_in_routes = APIRouter(route_class=ScopedRoute)


@sign_in_routes.get("/sign-in", include_in_schema=False, **access("open"))
async def sign_in_form(next: str = HOME_PATH) -> Response:
    return sign_in_response(local_path(next))


@sign_in_routes.post("/sign-in", include_in_schema=False, **access("open"))
async def sign_in(
    request: Request,
    svc: Svc,
    key: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = HOME_PATH,
) -> Response:
    if not same_site(request.headers):
        return sign_in_response(local_path(next), "Sign in from this site.", 403)
    principal = await svc.keyring.authenticate(key)
    if principal is None:
        return sign_in_response(local_path(next), "That key is not valid.", 401)
    response = RedirectResponse(local_path(next), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        svc.sessions.issue(principal.key_id),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@sign_in_routes.post("/sign-out", include_in_schema=False, **access("open"))
async def sign_out(
    request: Request, svc: Svc, csrf: Annotated[str, Form(alias=CSRF_FIELD, max_length=200)] = ""
) -> Response:
    cookie = request.cookies.get(SESSION_COOKIE, "")
    opened = svc.sessions.opened(cookie)
    if opened is not None:
        # Only this site's own page may sign a browser out: another site (a sibling
        # subdomain, another port on localhost) could otherwise post this form at will.
        if not same_site(request.headers) or not svc.sessions.csrf_valid(cookie, csrf):
            return html(pages.stale_form_page(), 403)
        key_id, issued = opened
        # This session ends, wherever its cookie was copied; colleagues signed in with the
        # same key stay signed in.
        await svc.keyring.sign_out(key_id, issued, issued + SESSION_SECONDS)
    response = RedirectResponse("/sign-in", status_code=303)
    response.delete_cookie(SESSION_COOKIE, httponly=True, samesite="strict")
    return response
