"""The HTTP API: request a verification, read its status and attempts, confirm its link."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import asyncpg
import orjson
from fastapi import Depends, FastAPI, Form, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from notifier import __version__, migrations, pages
from notifier.api_models import (
    TOKEN_MAX_CHARS,
    Attempt,
    Attempts,
    ConfirmIn,
    ConfirmOut,
    ErrorOut,
    Health,
    VerificationAccepted,
    VerificationIn,
    VerificationStatus,
)
from notifier.database import create_pool
from notifier.queries import sql
from notifier.redact import redact_email
from notifier.telemetry import QueueHealth, ServerSpans
from notifier.verifications import (
    Policy,
    RequestError,
    Throttled,
    VerificationResult,
    confirm,
    request_verification,
)

log = logging.getLogger(__name__)

# A database that does not answer within this many seconds makes a request fail with 503.
DATABASE_TIMEOUT_SECONDS = 10.0

CONFIRM_MESSAGES = {
    "verified": "The email address is verified.",
    "already_verified": "The email address was already verified with this link.",
    "expired": "The link has expired; request a new verification email.",
    "invalid": "The link is not valid.",
}
CONFIRM_STATUS = {"verified": 200, "already_verified": 200, "expired": 410, "invalid": 400}


class OrjsonResponse(JSONResponse):
    """JSON rendered by orjson (fast, and strict about what is serialisable)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


async def connection(request: Request) -> AsyncIterator[Any]:
    """A pool connection for the length of one request."""
    async with request.app.state.pool.acquire(timeout=DATABASE_TIMEOUT_SECONDS) as conn:
        yield conn


# Module level, not inside create_app: FastAPI resolves string annotations in module globals.
Conn = Annotated[Any, Depends(connection)]
# Posted by notifier's own pages; a link's query string is left unbounded so that an
# over-long link still gets the "cannot be used" page rather than a JSON error.
FormToken = Annotated[str, Form(max_length=TOKEN_MAX_CHARS)]


def require_json(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise _UnsupportedMediaType


def error(
    status: int,
    code: str,
    message: str,
    fields: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "fields": fields or []}}
    return OrjsonResponse(body, status_code=status, headers=headers)


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ErrorOut} for status in statuses}


def _json_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`_errors` for a route that answers in HTML: its errors are JSON all the same (with
    `model`, FastAPI would document them as the route's own media type)."""
    schema = {"$ref": "#/components/schemas/ErrorOut"}
    return {status: {"content": {"application/json": {"schema": schema}}} for status in statuses}


def _pages(descriptions: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """The other statuses an HTML page is served with, each with what it means."""
    return {
        status: {"description": text, "content": {"text/html": {}}}
        for status, text in descriptions.items()
    }


# FastAPI's 400 for a body it cannot decode at all (not UTF-8, a broken form).
_UNREADABLE_BODY = "There was an error parsing the body"
_LINK_PAGES = _pages(
    {
        400: "The link is not valid, or a newer link replaced it.",
        410: "The link expired; the page offers a new one.",
    }
)


class BodyLimit:
    """Refuses request bodies over `limit` bytes with 413, before the app reads them whole."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error(413, "body_too_large", f"request bodies are limited to {self.limit} bytes")
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


def create_app(
    database_url: str,
    policy: Policy,
    *,
    max_body_bytes: int = 16 * 1024,
    pool: Any = None,
    extra_routes: Callable[[FastAPI], None] | None = None,
    health_interval: float = 15.0,
) -> FastAPI:
    """The ASGI app. It owns a pool for its lifetime unless one is passed in."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = pool is None
        app.state.pool = pool if not owned else await create_pool(database_url)
        health = QueueHealth(app.state.pool, health_interval)
        health.register_gauges()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(health.run)
                yield
                tg.cancel_scope.cancel()
        finally:
            if owned:
                await app.state.pool.close()

    app = FastAPI(
        title="notifier",
        version=__version__,
        description="Email-verification delivery over a PostgreSQL outbox.",
        default_response_class=OrjsonResponse,
        lifespan=lifespan,
        # FastAPI's own telemetry would put the query string on its spans (`url.query`),
        # and /verify?token=... carries the token: ServerSpans records spans instead.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    app.add_middleware(ServerSpans)
    _install_error_handlers(app)

    @app.post(
        "/v1/verifications",
        status_code=202,
        response_model=VerificationAccepted,
        responses=_errors(409, 413, 415, 422, 429, 503),
        dependencies=[Depends(require_json)],
        summary="Request a verification email",
    )
    async def create_verification(
        body: VerificationIn,
        conn: Conn,
        idempotency_key: Annotated[
            str,
            Header(
                alias="Idempotency-Key",
                min_length=1,
                max_length=255,
                pattern=r"^[\x21-\x7e]+$",
                description="Makes retries safe: the same key and body return the first result.",
            ),
        ],
    ) -> Any:
        result: VerificationResult = await request_verification(
            conn,
            user_id=body.user_id,
            email=body.email,
            purpose=body.purpose,
            idempotency_key=idempotency_key,
            policy=policy,
            locale=body.locale,
        )
        return OrjsonResponse(
            VerificationAccepted(
                id=result.id, status=result.status, expires_at=result.expires_at
            ).model_dump(mode="json"),
            status_code=202,
            headers={"Idempotent-Replayed": "true"} if result.replayed else None,
        )

    @app.get(
        "/v1/verifications/{verification_id}",
        response_model=VerificationStatus,
        responses=_errors(404, 422, 503),
        summary="A verification's delivery status",
    )
    async def get_verification(verification_id: uuid.UUID, conn: Conn) -> VerificationStatus:
        row = await _status_row(conn, verification_id)
        return VerificationStatus(
            id=row["id"],
            status=row["status"],
            purpose=row["purpose"],
            email=redact_email(row["email"]),
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            verified=row["verified_at"] is not None,
            verified_at=row["verified_at"],
            superseded=row["superseded_at"] is not None,
            created_at=row["created_at"],
            expires_at=row["expires_at"],
            next_attempt_at=row["next_attempt_at"] if row["status"] == "pending" else None,
            completed_at=row["completed_at"],
            last_outcome=row["last_outcome"],
            last_error=row["last_error"],
        )

    @app.get(
        "/v1/verifications/{verification_id}/attempts",
        response_model=Attempts,
        responses=_errors(404, 422, 503),
        summary="A verification's delivery attempts, oldest first (for support staff)",
    )
    async def get_attempts(verification_id: uuid.UUID, conn: Conn) -> Attempts:
        await _status_row(conn, verification_id)  # 404 for an unknown id, not an empty list
        rows = await conn.fetch(sql("verification_attempts"), verification_id)
        return Attempts(
            verification_id=verification_id,
            attempts=[
                Attempt(
                    attempt=r["attempt"],
                    claimed_by=r["lease_owner"],
                    discovered_by=r["discovered_by"],
                    outcome=r["outcome"],
                    smtp_code=r["smtp_code"],
                    detail=r["detail"],
                    provider_message_id=r["provider_message_id"],
                    body_sent=r["body_sent"],
                    lease_held=r["lease_held"],
                    duration_ms=r["duration_ms"],
                    finished_at=r["finished_at"],
                )
                for r in rows
            ],
        )

    @app.post(
        "/v1/verifications/confirm",
        response_model=ConfirmOut,
        responses={
            410: {"model": ConfirmOut, "description": "The link expired."},
            400: {"model": ConfirmOut, "description": "The link is not valid."},
            **_errors(413, 415, 422, 503),
        },
        dependencies=[Depends(require_json)],
        summary="Confirm a verification token (for JSON clients)",
    )
    async def confirm_json(body: ConfirmIn, conn: Conn) -> Any:
        result = await confirm(conn, body.token, apply=True)
        outcome = result.outcome if result.outcome != "ready" else "invalid"
        out = ConfirmOut(
            outcome=outcome,
            verification_id=result.verification_id if outcome != "invalid" else None,
            message=CONFIRM_MESSAGES[outcome],
        )
        return OrjsonResponse(out.model_dump(mode="json"), status_code=CONFIRM_STATUS[outcome])

    @app.get(
        "/verify",
        response_class=HTMLResponse,
        responses={**_LINK_PAGES, **_json_errors(422, 503)},
        summary="The page an emailed link opens",
    )
    async def verify_page(conn: Conn, token: Annotated[str, Query()] = "") -> HTMLResponse:
        # Changes nothing: mail scanners prefetch links.
        result = await confirm(conn, token, apply=False)
        return _outcome_page(result.outcome, token, result.superseded)

    @app.post(
        "/verify",
        response_class=HTMLResponse,
        responses={**_LINK_PAGES, **_json_errors(413, 422, 503)},
        summary="The Confirm button",
    )
    async def verify_submit(
        conn: Conn, token: Annotated[str, Form(max_length=TOKEN_MAX_CHARS)] = ""
    ) -> HTMLResponse:
        result = await confirm(conn, token, apply=True)
        return _outcome_page(result.outcome, token, result.superseded)

    @app.post(
        "/verify/resend",
        response_class=HTMLResponse,
        responses={
            **_pages(
                {
                    202: "A new link is on its way.",
                    409: "No new link can be sent to this address.",
                    429: "Too many links were sent lately; try again later.",
                }
            ),
            **_LINK_PAGES,
            **_json_errors(413, 422, 503),
        },
        summary="Ask for a fresh link",
    )
    async def verify_resend(
        conn: Conn, token: Annotated[str, Form(max_length=TOKEN_MAX_CHARS)] = ""
    ) -> HTMLResponse:
        result = await confirm(conn, token, apply=False)
        # An expired link, or one the first press of this button already replaced.
        renewable = result.outcome == "expired" or result.superseded
        if not renewable or result.user_id is None or result.email is None:
            return _outcome_page(result.outcome, token, result.superseded)
        # One fresh link per expired link, however often the button is pressed.
        key = "resend:" + hashlib.sha256(token.encode()).hexdigest()[:40]
        try:
            await request_verification(
                conn,
                user_id=result.user_id,
                email=result.email,
                purpose=result.purpose,
                idempotency_key=key,
                policy=policy,
                locale=result.locale,
            )
        except Throttled as exc:
            refused = _html(pages.resend_refused_page(str(exc)), 429)
            refused.headers["Retry-After"] = str(exc.retry_after)
            return refused
        except RequestError as exc:
            return _html(pages.resend_refused_page(str(exc)), 409)
        return _html(pages.resent_page(), 202)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        summary="Prometheus text: queue health, outcomes, latencies",
    )
    async def metrics_text() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", response_model=Health, summary="The process is up")
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        responses={503: {"model": Health}},
        summary="The database answers and its schema is current",
    )
    async def readyz(request: Request) -> Any:
        try:
            async with request.app.state.pool.acquire(timeout=DATABASE_TIMEOUT_SECONDS) as conn:
                await conn.fetchval(sql("ready"))
                current = await migrations.status(conn, migrations.discover())
        except Exception as exc:  # any failure here means "not ready", never a 500
            return OrjsonResponse(
                Health(status="unavailable", detail=f"database: {type(exc).__name__}").model_dump(),
                status_code=503,
            )
        if current.pending:
            return OrjsonResponse(
                Health(status="unavailable", detail="migrations pending").model_dump(),
                status_code=503,
            )
        return Health(status="ready")

    if extra_routes is not None:
        extra_routes(app)
    return app


async def _status_row(conn: Any, verification_id: uuid.UUID) -> Any:
    row = await conn.fetchrow(sql("verification_status"), verification_id)
    if row is None:
        raise _NotFound
    return row


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=pages.PAGE_HEADERS)


def _outcome_page(outcome: str, token: str, superseded: bool) -> HTMLResponse:
    if outcome == "ready":
        # A live link: nothing happens until its Confirm button is pressed.
        return _html(pages.confirm_page(token))
    if outcome == "verified":
        return _html(pages.verified_page())
    if outcome == "already_verified":
        return _html(pages.already_verified_page())
    if outcome == "expired":
        return _html(pages.expired_page(token), 410)
    return _html(pages.invalid_page(superseded), 400)


class _UnsupportedMediaType(Exception):
    pass


class _NotFound(Exception):
    pass


def _install_error_handlers(app: FastAPI) -> None:
    async def validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        fields = sorted({".".join(str(p) for p in e["loc"] if p != "body") for e in exc.errors()})
        # Messages only, never the offending input: it may hold a token or an address.
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}"
            for e in exc.errors()
        )
        return error(422, "invalid_request", problems, fields)

    async def request_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestError)
        if isinstance(exc, Throttled):
            return error(429, exc.code, str(exc), headers={"Retry-After": str(exc.retry_after)})
        status = {"idempotency_conflict": 409}.get(exc.code, 422)
        fields = [exc.field] if hasattr(exc, "field") else []
        return error(status, exc.code, str(exc), fields)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 400 and exc.detail == _UNREADABLE_BODY:
            # The same answer as for malformed JSON: one shape for every unusable body.
            return error(422, "invalid_request", "body: the request body cannot be decoded")
        headers = dict(exc.headers) if exc.headers else None
        return error(exc.status_code, "http_error", str(exc.detail), headers=headers)

    async def media_type(request: Request, exc: Exception) -> Response:
        return error(415, "unsupported_media_type", "send the body as application/json")

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, "not_found", "no verification has that id")

    async def database_down(request: Request, exc: Exception) -> Response:
        log.warning("database unavailable for %s %s: %s", request.method, request.url.path, exc)
        return error(
            503,
            "database_unavailable",
            "the database is unavailable; try again",
            headers={"Retry-After": "5"},
        )

    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(RequestError, request_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(_UnsupportedMediaType, media_type)
    app.add_exception_handler(_NotFound, not_found)
    for kind in (
        OSError,
        TimeoutError,
        asyncpg.PostgresConnectionError,
        asyncpg.InterfaceError,
        asyncpg.CannotConnectNowError,
        # What asyncpg raises, about half the time, for a pooled connection the server has
        # just closed (restart, failover, idle killer): the request never reached the server.
        asyncpg.InternalClientError,
    ):
        app.add_exception_handler(kind, database_down)
