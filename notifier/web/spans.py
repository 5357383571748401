"""The HTTP listeners' server spans: one SERVER span per request, named by its route."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind

from notifier.telemetry import context_of, link_to, tracer, tracing_enabled


class ServerSpans:
    """ASGI middleware: one SERVER span per HTTP request.

    An incoming traceparent is continued only when `trust_incoming(scope)` says the caller
    proved who it is (an authenticated internal client); anyone else's starts a new trace,
    linked to theirs, so a stranger cannot graft spans onto our traces or pick trace ids.
    The span names the route template, never the raw URL or path: a query string can hold a
    token, a path an address, and a stranger chooses both (and their length), before any key
    is checked. What a span needs is which route answered.
    """

    def __init__(self, app: Any, trust_incoming: Callable[[Any], bool] | None = None) -> None:
        self.app = app
        self.trust_incoming = trust_incoming

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not tracing_enabled():
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        incoming = context_of(headers)
        links: list[Link] = []
        if self.trust_incoming is not None and self.trust_incoming(scope):
            parent = incoming
        else:
            parent, links = Context(), link_to(incoming)
        method = scope["method"]
        status: dict[str, int] = {}

        async def tracked(message: Any) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        with tracer.start_as_current_span(
            method,
            context=parent,
            kind=SpanKind.SERVER,
            links=links,
            attributes={
                "http.request.method": method,
                "url.scheme": scope.get("scheme", "http"),
                "network.protocol.version": scope.get("http_version", "1.1"),
            },
        ) as span:
            try:
                await self.app(scope, receive, tracked)
            finally:
                route = scope.get("route")
                template = getattr(route, "path", None)
                if template:
                    span.update_name(f"{method} {template}")
                    span.set_attribute("http.route", template)
                code = status.get("code", 500)
                span.set_attribute("http.response.status_code", code)
                if code >= 500:
                    span.set_attribute("error.type", str(code))
                    span.set_status(trace.Status(trace.StatusCode.ERROR))
