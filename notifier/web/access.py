"""Who may call the internal API, and how each route says which scope it needs.

Every route of the internal app is a `ScopedRoute` that declares its access with `access()`:
a scope (the caller must present a key that has it) or "open" (the probes, the sign-in
form). A route that declares nothing cannot be built, so a new route cannot be forgotten.

A caller proves itself with `Authorization: Bearer <key>`, or, in a browser, with the
session cookie that signing in with a key sets. The session names the key, so revoking
the key ends its sessions too (within storage.api_keys.CACHE_SECONDS). A request a session makes
that could change something (any method but GET and HEAD) must come from this site and
carry the CSRF token the page's form was given (`Sessions.csrf_token`); a bearer key needs
neither, since no other site can make a browser send it.

A browser (a request accepting text/html) is refused with a page, not JSON: the sign-in
form when it is not signed in or its key lacks the scope, so it can sign in where it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Literal
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from notifier.apikeys import Principal
from notifier.apikeys import Scope as KeyScope
from notifier.storage.database import UNREACHABLE_MIDWAY
from notifier.tokens import TokenKeys
from notifier.web import pages
from notifier.web.responses import error, html

Access = KeyScope | Literal["open"]
ACCESS_FIELD = "x-notifier-access"
SECURITY_SCHEME = "apiKey"
SESSION_COOKIE = "notifier_session"
# How long a browser session lasts after signing in, seconds.
SESSION_SECONDS = 8 * 3600
_SESSION_CONTEXT = b"notifier.web.console.routes-session.v1"
_CSRF_CONTEXT = b"notifier.web.console.routes-csrf.v1"
# Where a page's form puts its CSRF token, or where a script would (the console has none).
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
# Where a browser goes after signing in when the sign-in link names nowhere else.
HOME_PATH = "/console"
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
            if principal is None:
                return _refuse_unknown(request)
            if not principal.may(needed):
                return _refuse_scope(request, principal, needed)
            via = (request.scope.get("state") or {}).get(_STATE_VIA)
            # A browser sends the cookie with any form another site makes it post.
            unsafe = via == "session" and request.method not in _SAFE_METHODS
            if unsafe and not await _csrf_checked(request):
                return _refuse_forgery(request)
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


def wants_html(request: Request) -> bool:
    """Whether the caller is a browser navigating (scripts and API clients ask for JSON or
    anything, and get the JSON errors the API documents)."""
    return "text/html" in request.headers.get("accept", "")


def _return_path(request: Request) -> str:
    """Where to come back to after signing in: this page, or the console after a form."""
    if request.method not in _SAFE_METHODS:
        return HOME_PATH
    query = request.url.query
    return local_path(request.url.path + (f"?{query}" if query else ""))


def _refuse_unknown(request: Request) -> Response:
    if not wants_html(request):
        return unauthorized()
    page = sign_in_response(request, _return_path(request), None, 401)
    page.headers["WWW-Authenticate"] = 'Bearer realm="notifier"'
    return page


def _refuse_scope(request: Request, principal: Principal, needed: Access) -> Response:
    challenge = {"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{needed}"'}
    if not wants_html(request):
        return error(
            403, "forbidden", f"this API key lacks the {needed!r} scope", headers=challenge
        )
    problem = (
        f"The key you signed in with ({principal.name}) lacks the “{needed}” scope this page "
        "needs. Sign in with a key that has it."
    )
    page = sign_in_response(request, _return_path(request), problem, 403)
    page.headers.update(challenge)
    return page


def _refuse_forgery(request: Request) -> Response:
    if not wants_html(request):
        return error(
            403,
            "csrf_failed",
            "a signed-in browser's form must come from this site with its page's CSRF token; "
            "reload the page, or send a bearer key",
        )
    return html(pages.stale_form_page(), 403)


async def _csrf_checked(request: Request) -> bool:
    """Whether a session's unsafe request comes from one of our pages: this site (as the
    browser tells), with the token that page's form was given for this very session."""
    if not same_site(request.headers):
        return False
    token = request.headers.get(CSRF_HEADER)
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if token is None and media_type in _FORM_TYPES:
        field = (await request.form()).get(CSRF_FIELD)
        token = field if isinstance(field, str) else None
    # The cookie Authentication read, not another copy a neighbouring site may have set.
    cookie = _cookie(request.scope, SESSION_COOKIE)
    sessions: Sessions = request.app.state.services.sessions
    return token is not None and cookie is not None and sessions.csrf_valid(cookie, token)


# Where notifier dev keeps, on the app's state, the file holding the key it made.
DEV_KEY_FILE = "dev_key_file"
_FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def csrf_token_of(request: Request) -> str:
    """The CSRF token this request's pages put in their forms: "" unless it came with a
    session (a bearer key's requests need none)."""
    if (request.scope.get("state") or {}).get(_STATE_VIA) != "session":
        return ""
    cookie = _cookie(request.scope, SESSION_COOKIE)
    sessions: Sessions = request.app.state.services.sessions
    return "" if cookie is None else sessions.csrf_token(cookie)


def sign_in_response(
    request: Request, next_path: str, problem: str | None = None, status: int = 200
) -> Response:
    """The sign-in form, coming back to `next_path` (a local path) once signed in; under
    notifier dev, pointing to the key file dev made (DEV_KEY_FILE on the app's state)."""
    key_file = getattr(request.app.state, DEV_KEY_FILE, None)
    page = html(pages.sign_in_page(next_path, problem, key_file and str(key_file)), status)
    # same-origin, not no-referrer: a browser posting from a no-referrer page sends
    # "Origin: null", and the form must be able to say where it comes from.
    page.headers["Referrer-Policy"] = "same-origin"
    return page


def local_path(target: str, default: str = HOME_PATH) -> str:
    """Only a path on this site: a sign-in link must not redirect anywhere else."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return default
    return quote(target, safe="/?=&-_.~%")


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
        # ASCII only: HMAC comparison refuses other text, and no cookie of ours has any.
        if not cookie.isascii() or len(parts) != 4 or not parts[1].isdigit():
            return None
        key_id, issued_ms, kid, mac = parts
        issued = int(issued_ms) / 1000
        if issued + SESSION_SECONDS < (now if now is not None else time.time()):
            return None
        if not self.keys.verify(_SESSION_CONTEXT, f"{key_id}.{issued_ms}".encode(), f"{kid}.{mac}"):
            return None
        return key_id, issued

    def csrf_token(self, cookie: str) -> str:
        """The token a page's forms carry for the session `cookie`: a MAC of the cookie, so
        another site can neither read nor forge it, and it ends with the session."""
        return self.keys.sign(_CSRF_CONTEXT, cookie.encode())

    def csrf_valid(self, cookie: str, token: str) -> bool:
        """Whether `token` is `csrf_token(cookie)` under any configured secret."""
        if not token.isascii() or not cookie.isascii():
            return False
        return self.keys.verify(_CSRF_CONTEXT, cookie.encode(), token)

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
