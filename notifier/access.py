"""Who may call the internal API, and how each route says which scope it needs.

Every route of the internal app is a `ScopedRoute` that declares its access with `access()`:
a scope (the caller must present a key that has it) or "open" (the probes, the sign-in
form). A route that declares nothing cannot be built, so a new route cannot be forgotten.

A caller proves itself with `Authorization: Bearer <key>`, or, in a browser, with the
session cookie that signing in with a key sets. The session names the key, so revoking
the key ends its sessions too (within apikeys.CACHE_SECONDS). Sessions authenticate only
reads: a form that changes something must carry a bearer key or a CSRF token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Literal

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from notifier.apikeys import Principal
from notifier.apikeys import Scope as KeyScope
from notifier.database import UNREACHABLE_MIDWAY
from notifier.responses import error
from notifier.tokens import TokenKeys

Access = KeyScope | Literal["open"]
ACCESS_FIELD = "x-notifier-access"
SECURITY_SCHEME = "apiKey"
SESSION_COOKIE = "notifier_session"
# How long a browser session lasts after signing in, seconds.
SESSION_SECONDS = 8 * 3600
_SESSION_CONTEXT = b"notifier.console-session.v1"
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_STATE_PRINCIPAL = "principal"
_STATE_VIA = "auth_via"


def access(needed: Access) -> dict[str, Any]:
    """Route keyword arguments declaring who may call it (and documenting it in OpenAPI)."""
    extra: dict[str, Any] = {ACCESS_FIELD: needed}
    if needed != "open":
        extra["security"] = [{SECURITY_SCHEME: []}]
    return {"openapi_extra": extra}


def principal_of(scope: Scope) -> Principal | None:
    state = scope.get("state") or {}
    found = state.get(_STATE_PRINCIPAL)
    return found if isinstance(found, Principal) else None


class ScopedRoute(APIRoute):
    """An APIRoute that refuses callers without the scope it declares, before the request
    body is read or any dependency runs: a refused request does and writes nothing."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        extra = kwargs.get("openapi_extra") or {}
        needed = extra.get(ACCESS_FIELD)
        if needed is None:
            raise TypeError(f"route {path} must declare who may call it: **access(...)")
        # Set before APIRoute.__init__, which builds the handler.
        self.access: Access = needed
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        needed = self.access
        if needed == "open":
            return handler

        async def guarded(request: Request) -> Response:
            principal = principal_of(request.scope)
            via = (request.scope.get("state") or {}).get(_STATE_VIA)
            if principal is None:
                return unauthorized()
            if via == "session" and request.method not in _SAFE_METHODS:
                # A browser sends the cookie with any form another site makes it post.
                return unauthorized("a signed-in browser may only read; send a bearer key")
            if not principal.may(needed):
                return error(
                    403,
                    "forbidden",
                    f"this API key lacks the {needed!r} scope",
                    headers={
                        "WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{needed}"'
                    },
                )
            return await handler(request)

        return guarded


def routes(app: Any) -> Iterator[Any]:
    """Every route an app answers, through included routers (FastAPI includes them lazily,
    as wrappers that keep the router they came from)."""
    pending = list(app.routes)
    while pending:
        route = pending.pop(0)
        included = getattr(route, "original_router", None)
        if included is not None:
            pending[:0] = included.routes
        else:
            yield route


def unauthorized(message: str | None = None) -> Response:
    return error(
        401,
        "unauthorized",
        message
        or "send an API key: Authorization: Bearer <key> (create one with `notifier keys create`)",
        headers={"WWW-Authenticate": 'Bearer realm="notifier"'},
    )


class Sessions:
    """Signed, expiring cookies naming the key a browser signed in with."""

    def __init__(self, keys: TokenKeys) -> None:
        self.keys = keys

    def issue(self, key_id: str, now: float | None = None) -> str:
        """A cookie naming `key_id`, issued `now` (epoch seconds, to the millisecond)."""
        issued = round((now if now is not None else time.time()) * 1000)
        data = f"{key_id}.{issued}"
        return f"{data}.{self.keys.sign(_SESSION_CONTEXT, data.encode())}"

    def opened(self, cookie: str, now: float | None = None) -> tuple[str, float] | None:
        """The key a cookie names and when it was issued, if it is ours and unexpired."""
        parts = cookie.split(".")
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        key_id, issued_ms, kid, mac = parts
        issued = int(issued_ms) / 1000
        if issued + SESSION_SECONDS < (now if now is not None else time.time()):
            return None
        if not self.keys.verify(_SESSION_CONTEXT, f"{key_id}.{issued_ms}".encode(), f"{kid}.{mac}"):
            return None
        return key_id, issued

    def key_id(self, cookie: str, now: float | None = None) -> str | None:
        """The key a cookie names, if it is ours and unexpired."""
        opened = self.opened(cookie, now)
        return None if opened is None else opened[0]


class Authentication:
    """ASGI middleware: finds who the caller is (a key, a session, or nobody) and notes it in
    the request's state. It refuses nothing itself: each ScopedRoute decides."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                principal, via = await self._identify(scope)
            except UNREACHABLE_MIDWAY:
                # Outside the app's exception handlers: answer as they would.
                response = error(
                    503,
                    "database_unavailable",
                    "the database is unavailable; try again",
                    headers={"Retry-After": "5"},
                )
                await response(scope, receive, send)
                return
            state = scope.setdefault("state", {})
            state[_STATE_PRINCIPAL] = principal
            state[_STATE_VIA] = via
        await self.app(scope, receive, send)

    async def _identify(self, scope: Scope) -> tuple[Principal | None, str | None]:
        services = scope["app"].state.services
        authorizations = _headers(scope, b"authorization")
        if len(authorizations) > 1:
            # A proxy in front may read the other one: one request names one client.
            return None, None
        authorization = authorizations[0] if authorizations else None
        if authorization is not None:
            # The scheme is case-insensitive (RFC 9110); the key itself is not.
            kind, _, credentials = authorization.partition(" ")
            if kind.lower() != "bearer" or not credentials.strip():
                return None, None
            return await services.keyring.authenticate(credentials.strip()), "bearer"
        cookie = _cookie(scope, SESSION_COOKIE)
        if cookie is None:
            return None, None
        opened = services.sessions.opened(cookie)
        if opened is None:
            return None, None
        return await services.keyring.session_principal(*opened), "session"


def same_site(headers: Any) -> bool:
    """Whether a form post comes from this site: a browser says so in Sec-Fetch-Site (any
    browser from the last few years); without it (curl, a script), an Origin, if sent, must
    not name another site. Host and Origin are never compared: behind a proxy they differ."""
    site = headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = headers.get("origin")
    return origin is None or origin == "null"


def trusted_caller(scope: Scope) -> bool:
    """Whether a request's trace context may be continued: only an authenticated caller's."""
    return principal_of(scope) is not None


def _headers(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope["headers"] if key == name]


def _header(scope: Scope, name: bytes) -> str | None:
    found = _headers(scope, name)
    return found[0] if found else None


def _cookie(scope: Scope, name: str) -> str | None:
    raw = _header(scope, b"cookie")
    if raw is None:
        return None
    for part in raw.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None
