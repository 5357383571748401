"""What both HTTP listeners share: JSON errors, request bounds, probes, database access.

The internal API (notifier.web.api) and the public link pages (notifier.web.public) are separate
ASGI apps on separate listeners; this module holds the plumbing they have in common.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from notifier.config import (
    DEFAULT_PRODUCT_NAME,
    InboundSettings,
    WebhookSettings,
    WorkerSettings,
)
from notifier.storage import migrations
from notifier.storage.api_keys import KeyRing
from notifier.storage.connection import Connection, Pool
from notifier.storage.database import UNREACHABLE_MIDWAY
from notifier.storage.queries import sql
from notifier.strings import PageStrings
from notifier.verifications import Policy, RequestError, Throttled
from notifier.version import __version__
from notifier.web.access import ScopedRoute, Sessions, access
from notifier.web.api_models import ErrorOut, Health
from notifier.web.responses import OrjsonResponse, error
from notifier.web.ses import Certificates
from notifier.web.spans import ServerSpans

log = logging.getLogger(__name__)

# A database that does not answer within this many seconds makes a request fail with 503.
DATABASE_TIMEOUT_SECONDS = 10.0
# Seconds a client gets to send each part of a request body before it is answered 408.
BODY_TIMEOUT_SECONDS = 10.0
MAX_BODY_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class Services:
    """What request handlers use, built once per process and shared by both listeners."""

    pool: Pool
    policy: Policy
    keyring: KeyRing
    sessions: Sessions
    # Where webhook endpoints may be registered to (NOTIFIER_WEBHOOK_ALLOW_PRIVATE), and how
    # long a rotated-out secret still signs.
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)
    # Provider callbacks (POST /inbound/ses): the topics taken, the certificates trusted,
    # the return paths' domain, and how long a bounce suppresses an address.
    inbound: InboundSettings = field(default_factory=InboundSettings)
    bounce_domain: str | None = None
    suppression_seconds: float = field(default_factory=lambda: WorkerSettings().suppression_ttl)
    certificates: Certificates = field(default_factory=Certificates)
    # The link pages' words in each language, and the product they name
    # (NOTIFIER_TEMPLATE_DIR, NOTIFIER_PRODUCT_NAME: what the email says too).
    strings: PageStrings = field(default_factory=lambda: PageStrings.load(None))
    product_name: str = DEFAULT_PRODUCT_NAME

    @classmethod
    def over(
        cls,
        pool: Pool,
        policy: Policy,
        webhooks: WebhookSettings | None = None,
        *,
        inbound: InboundSettings | None = None,
        bounce_domain: str | None = None,
        suppression_seconds: float | None = None,
        strings: PageStrings | None = None,
        product_name: str = DEFAULT_PRODUCT_NAME,
    ) -> Services:
        return cls(
            pool,
            policy,
            KeyRing(pool),
            Sessions(policy.keys),
            webhooks or WebhookSettings(),
            inbound or InboundSettings(),
            bounce_domain,
            WorkerSettings().suppression_ttl
            if suppression_seconds is None
            else suppression_seconds,
            strings=strings or PageStrings.load(None),
            product_name=product_name,
        )


def services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


async def _services(request: Request) -> Services:
    # A coroutine, as every dependency here: FastAPI runs plain functions in a thread pool,
    # which costs two thread hand-offs per request.
    return services(request)


async def connection(request: Request) -> AsyncIterator[Connection]:
    """A pool connection for the length of one request."""
    pool = services(request).pool
    async with pool.acquire(timeout=DATABASE_TIMEOUT_SECONDS) as conn:
        yield conn


# Module level: FastAPI resolves string annotations in module globals.
Conn = Annotated[Connection, Depends(connection)]
Svc = Annotated[Services, Depends(_services)]


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for JSON errors in the shared shape."""
    return {status: {"model": ErrorOut} for status in statuses}


def json_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`errors` for a route that answers in HTML: its errors are JSON all the same (with
    `model`, FastAPI would document them as the route's own media type)."""
    schema = {"$ref": "#/components/schemas/ErrorOut"}
    return {status: {"content": {"application/json": {"schema": schema}}} for status in statuses}


def html_pages(descriptions: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """The other statuses an HTML page is served with, each with what it means."""
    return {
        status: {"description": text, "content": {"text/html": {}}}
        for status, text in descriptions.items()
    }


class UnsupportedMediaType(Exception):
    pass


class NotFound(Exception):
    def __init__(self, what: str = "no verification has that id") -> None:
        super().__init__(what)


async def require_json(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType


class BodyGuard:
    """Bounds what one request body can hold: `limit` bytes (413), and `timeout` seconds for
    the whole of it to arrive (408), so a client that trickles a body cannot pin a connection
    and a database connection for as long as it likes."""

    def __init__(self, app: ASGIApp, limit: int, timeout: float) -> None:
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, send, _TooLarge())
            return
        seen = 0
        started = False
        # One deadline for the whole body: a bound per part would let a client send a byte
        # just before each part's time runs out, for hours.
        deadline = anyio.current_time() + self.timeout

        async def bounded() -> Message:
            nonlocal seen
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())) as waited:
                message = await receive()
            if waited.cancelled_caught:
                raise _TooSlow
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded, tracked)
        except (_TooLarge, _TooSlow) as exc:
            if started:
                raise
            await self._refuse(scope, send, exc)

    async def _refuse(self, scope: Scope, send: Send, exc: BaseException) -> None:
        if isinstance(exc, _TooSlow):
            response = error(
                408, "request_timeout", f"the request body did not arrive within {self.timeout:g}s"
            )
            response.headers["Connection"] = "close"
        else:
            response = error(
                413, "body_too_large", f"request bodies are limited to {self.limit} bytes"
            )

        async def nothing() -> Message:
            return {"type": "http.disconnect"}

        await response(scope, nothing, send)


# BaseException, not Exception: FastAPI turns any Exception raised while it reads a body
# into "cannot parse the body" (400), and these must reach BodyGuard as themselves.
class _TooLarge(BaseException):
    pass


class _TooSlow(BaseException):
    pass


# FastAPI's 400 for a body it cannot decode at all (not UTF-8, a broken form).
_UNREADABLE_BODY = "There was an error parsing the body"


def listener_app(
    title: str,
    services: Services,
    *,
    max_body_bytes: int,
    body_timeout: float,
    trust_incoming: Callable[[Any], bool] | None,
    description: str = "",
) -> FastAPI:
    """An app as each listener starts it: its services, scoped routes, JSON errors, spans and
    body bounds; no docs routes (the internal app serves its own, behind a key).

    `trust_incoming`: which callers' `traceparent` is continued (None: nobody's).
    """
    app = FastAPI(
        title=title,
        version=__version__,
        description=description,
        default_response_class=OrjsonResponse,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # FastAPI's own telemetry would put the query string (a link's token) on its spans
        # (`url.query`); ServerSpans records spans instead.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.router.route_class = ScopedRoute
    app.state.services = services
    # The last added runs outermost: the caller's span wraps the body's bounds.
    app.add_middleware(BodyGuard, limit=max_body_bytes, timeout=body_timeout)
    app.add_middleware(ServerSpans, trust_incoming=trust_incoming)
    install_error_handlers(app)
    return app


def install_error_handlers(app: FastAPI) -> None:
    """Every error either listener answers, in the one JSON shape."""

    async def validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        named = [(_field(e), _problem(e)) for e in exc.errors()]
        fields = sorted({field for field, _ in named if field != "body"})
        # Messages only, never the offending input: it may hold a token or an address.
        problems = "; ".join(f"{field}: {problem}" for field, problem in named)
        return error(422, "invalid_request", problems, fields)

    async def request_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestError)
        if isinstance(exc, Throttled):
            return error(429, exc.code, str(exc), headers={"Retry-After": str(exc.retry_after)})
        status = {"idempotency_conflict": 409, "no_code": 409}.get(exc.code, 422)
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
        return error(404, "not_found", str(exc))

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
    app.add_exception_handler(UnsupportedMediaType, media_type)
    app.add_exception_handler(NotFound, not_found)
    for kind in UNREACHABLE_MIDWAY:
        app.add_exception_handler(kind, database_down)


# /healthz and /readyz: open on both listeners, for load balancers and orchestrators.
probes = APIRouter(route_class=ScopedRoute)
# The tab's icon on both listeners' pages: an envelope, what notifier sends.
_FAVICON = resources.files("notifier").joinpath("static", "favicon.ico")


@probes.get("/favicon.ico", include_in_schema=False, **access("open"))
async def favicon() -> Response:
    headers = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"}
    return Response(_favicon(), 200, headers, "image/x-icon")


@cache
def _favicon() -> bytes:
    return _FAVICON.read_bytes()


@probes.get("/healthz", response_model=Health, summary="The process is up", **access("open"))
async def healthz() -> Health:
    return Health(status="ok")


@probes.get(
    "/readyz",
    response_model=Health,
    responses={503: {"model": Health}},
    summary="The database answers and its schema is current",
    **access("open"),
)
async def readyz(svc: Svc) -> Any:
    try:
        async with svc.pool.acquire(timeout=DATABASE_TIMEOUT_SECONDS) as conn:
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


def _field(problem: Mapping[str, Any]) -> str:
    """The request field a validation problem is about, dotted ("body" for the whole body:
    a JSON syntax error's location is a character offset, not a field)."""
    if problem["type"] == "json_invalid":
        return "body"
    return ".".join(str(p) for p in problem["loc"] if p != "body") or "body"


def _problem(problem: Mapping[str, Any]) -> str:
    if problem["type"] == "json_invalid":
        return "the body is not valid JSON"
    return str(problem["msg"])
