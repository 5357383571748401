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

from fastapi import APIRouter, Depends, FastAPI, Form, Header, Path, Query, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from notifier.outcomes import CodeOutcome
from notifier.redact import redact_email
from notifier.storage import codes, event_feed, suppressions, webhooks
from notifier.storage.connection import Runner
from notifier.storage.outbox import request_standalone
from notifier.storage.queries import sql
from notifier.verifications import InvalidRequest, VerificationResult
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
    CodeIn,
    CodeOut,
    EventOut,
    EventsPage,
    LatestVerification,
    Suppression,
    Suppressions,
    VerificationAccepted,
    VerificationIn,
    VerificationStatus,
    WebhookCreated,
    WebhookEndpointOut,
    WebhookEndpoints,
    WebhookIn,
    WebhookRotated,
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
    routers = (verifications, event_routes, webhook_routes, suppression_routes, operations)
    for router in (*routers, sign_in_routes):
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
        return_to=body.return_to,
        key_return_urls=caller.return_urls if caller is not None else None,
        method=body.method,
    )
    return OrjsonResponse(
        VerificationAccepted(
            id=result.id, status=result.status, method=result.method, expires_at=result.expires_at
        ).model_dump(mode="json"),
        status_code=202,
        headers={"Idempotent-Replayed": "true"} if result.replayed else None,
    )


# What the app may tell the person, by what a code did.
CODE_MESSAGES: dict[CodeOutcome, str] = {
    "verified": "Your email address is confirmed.",
    "already_verified": "This email address was already confirmed.",
    "wrong": "That code is not right. Check the latest email and try again.",
    "expired": "That code has expired. Ask for a new email.",
    "locked": "Too many wrong codes. Ask for a new email.",
}
_CODE_STATUS: dict[CodeOutcome, int] = {
    "verified": 200,
    "already_verified": 200,
    "wrong": 400,
    "expired": 410,
    "locked": 423,
}


@verifications.post(
    "/{verification_id}/code",
    response_model=CodeOut,
    responses={
        400: {"model": CodeOut, "description": "A wrong code (every wrong code alike)."},
        410: {"model": CodeOut, "description": "The code expired, or was replaced."},
        423: {"model": CodeOut, "description": "Too many wrong codes: a new request is needed."},
        429: {"model": CodeOut, "description": "The mailbox's wrong codes: try again later."},
        **errors(401, 403, 404, 409, 413, 415, 422, 503),
    },
    dependencies=[Depends(require_json)],
    summary="Confirm a verification with the code the person typed into the app",
    # The app that asked for the verification confirms it: the same key, the same scope.
    # A scope of its own would buy nothing, since only the key that requested a
    # verification (or an earlier one of its resend chain) may confirm its code.
    **access("request"),
)
async def confirm_code(
    request: Request, verification_id: uuid.UUID, body: CodeIn, conn: Conn, svc: Svc
) -> Any:
    caller = principal_of(request.scope)
    try:
        checked = await codes.check_standalone(
            conn,
            verification_id,
            body.code,
            policy=svc.policy,
            client_id=caller.key_id if caller is not None else "",
        )
    except codes.UnknownVerification:
        raise NotFound from None
    status = _CODE_STATUS[checked.outcome]
    headers = None
    if checked.locked_by == "mailbox":
        status, headers = 429, {"Retry-After": str(checked.retry_after)}
    out = CodeOut(
        result=checked.outcome,
        verification_id=verification_id,
        attempts_remaining=checked.attempts_remaining,
        superseded_by=checked.superseded_by,
        locked_by=checked.locked_by,
        retry_after=checked.retry_after,
        message=CODE_MESSAGES[checked.outcome],
    )
    return OrjsonResponse(out.model_dump(mode="json"), status_code=status, headers=headers)


@verifications.get(
    "/{verification_id}",
    response_model=VerificationStatus,
    responses=errors(401, 403, 404, 422, 503),
    summary="A verification's delivery status",
    **access("read"),
)
async def get_verification(verification_id: uuid.UUID, conn: Conn, svc: Svc) -> VerificationStatus:
    row = await _status_row(conn, verification_id)
    has_code = row["method"] != "link"
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
        method=row["method"],
        code_attempts_remaining=max(svc.policy.codes.max_failures - row["code_failures"], 0)
        if has_code
        else None,
        code_expires_at=row["code_expires_at"],
        locked=row["code_locked_at"] is not None,
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


event_routes = APIRouter(prefix="/v1/events", route_class=ScopedRoute)


@event_routes.get(
    "",
    response_model=EventsPage,
    responses=errors(401, 403, 422, 503),
    summary="Events in commit order, resumable from a cursor (no gaps, no repeats)",
    **access("read"),
)
async def list_events(
    conn: Conn,
    after: Annotated[
        str | None,
        Query(
            max_length=41,
            description="A cursor from an earlier page's `next` (or an event's `cursor`); "
            "absent: from the oldest event kept (NOTIFIER_EVENT_RETENTION).",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=event_feed.MAX_PAGE)] = 100,
) -> Any:
    try:
        cursor = event_feed.START if after is None else event_feed.Cursor.parse(after)
    except ValueError as exc:
        raise InvalidRequest("after", str(exc)) from None
    page = await event_feed.events_after(conn, cursor, limit)
    out = EventsPage(
        events=[
            EventOut(
                id=e.id,
                type=e.type,  # type: ignore[arg-type]
                occurred_at=e.occurred_at,
                verification_id=e.verification_id,
                data=e.data,
                cursor=str(e.cursor),
            )
            for e in page
        ],
        next=str(page[-1].cursor if page else cursor),
    )
    return OrjsonResponse(out.model_dump(mode="json"))


webhook_routes = APIRouter(prefix="/v1/webhooks", route_class=ScopedRoute)
_NO_ENDPOINT = "no webhook endpoint has that id"


def _endpoint_out(e: webhooks.Endpoint) -> dict[str, Any]:
    return {
        "id": e.id,
        "url": e.url,
        "event_types": None if e.event_types is None else list(e.event_types),
        "description": e.description,
        "created_at": e.created_at,
        "failing_since": e.failing_since,
        "last_success_at": e.last_success_at,
        "last_failure_at": e.last_failure_at,
        "disabled_at": e.disabled_at,
        "disabled_reason": e.disabled_reason,
        "previous_secret_until": e.previous_until,
        "pending": e.pending,
        "dead": e.dead,
    }


@webhook_routes.post(
    "",
    status_code=201,
    response_model=WebhookCreated,
    responses=errors(401, 403, 413, 415, 422, 503),
    dependencies=[Depends(require_json)],
    summary="Register a webhook endpoint (its secret is shown only in this answer)",
    **access("admin"),
)
async def create_webhook(body: WebhookIn, conn: Conn, svc: Svc) -> Any:
    try:
        endpoint, secret = await webhooks.add(
            conn,
            svc.policy.keys,
            body.url,
            body.event_types,
            body.description,
            allow_private=svc.webhooks.allow_private,
        )
    except webhooks.WebhookError as exc:
        raise InvalidRequest("url", str(exc)) from None
    out = WebhookCreated(**_endpoint_out(endpoint), secret=secret)
    return OrjsonResponse(out.model_dump(mode="json"), status_code=201)


@webhook_routes.get(
    "",
    response_model=WebhookEndpoints,
    responses=errors(401, 403, 503),
    summary="Every webhook endpoint, with its health",
    **access("admin"),
)
async def list_webhooks(conn: Conn) -> Any:
    found = [WebhookEndpointOut(**_endpoint_out(e)) for e in await webhooks.listing(conn)]
    return OrjsonResponse(WebhookEndpoints(endpoints=found).model_dump(mode="json"))


@webhook_routes.delete(
    "/{endpoint_id}",
    status_code=204,
    responses=errors(401, 403, 404, 422, 503),
    summary="Remove a webhook endpoint, with its deliveries",
    **access("admin"),
)
async def delete_webhook(endpoint_id: uuid.UUID, conn: Conn) -> Response:
    try:
        await webhooks.remove(conn, endpoint_id)
    except webhooks.WebhookError:
        raise NotFound(_NO_ENDPOINT) from None
    return Response(status_code=204)


@webhook_routes.post(
    "/{endpoint_id}/rotate",
    response_model=WebhookRotated,
    responses=errors(401, 403, 404, 422, 503),
    summary="A new secret (shown only now); the old one signs beside it for a while",
    **access("admin"),
)
async def rotate_webhook(endpoint_id: uuid.UUID, conn: Conn, svc: Svc) -> Any:
    try:
        secret, until = await webhooks.rotate(
            conn, svc.policy.keys, endpoint_id, svc.webhooks.rotation_overlap
        )
    except webhooks.WebhookError:
        raise NotFound(_NO_ENDPOINT) from None
    out = WebhookRotated(secret=secret, previous_secret_until=until)
    return OrjsonResponse(out.model_dump(mode="json"))


@webhook_routes.post(
    "/{endpoint_id}/enable",
    status_code=204,
    responses=errors(401, 403, 404, 422, 503),
    summary="Enable a disabled endpoint; its waiting deliveries go out",
    **access("admin"),
)
async def enable_webhook(endpoint_id: uuid.UUID, conn: Conn) -> Response:
    try:
        await webhooks.enable(conn, endpoint_id)
    except webhooks.WebhookError:
        raise NotFound(_NO_ENDPOINT) from None
    return Response(status_code=204)


@webhook_routes.post(
    "/deliveries/{delivery_id}/replay",
    status_code=204,
    responses=errors(401, 403, 404, 422, 503),
    summary="Send a dead webhook delivery again, with a fresh retry schedule",
    **access("admin"),
)
async def replay_webhook(
    delivery_id: Annotated[int, Path(ge=1, le=2**63 - 1)], conn: Conn
) -> Response:
    if not await webhooks.replay(conn, delivery_id):
        raise NotFound("no dead webhook delivery has that id")
    return Response(status_code=204)


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
async def sign_in_form(request: Request, next: str = HOME_PATH) -> Response:
    return sign_in_response(request, local_path(next))


@sign_in_routes.post("/sign-in", include_in_schema=False, **access("open"))
async def sign_in(
    request: Request,
    svc: Svc,
    key: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = HOME_PATH,
) -> Response:
    if not same_site(request.headers):
        return sign_in_response(request, local_path(next), "Sign in from this site.", 403)
    principal = await svc.keyring.authenticate(key)
    if principal is None:
        return sign_in_response(request, local_path(next), "That key is not valid.", 401)
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
