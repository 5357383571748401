"""Response shapes both HTTP listeners answer with: JSON errors and the link pages' HTML."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import HTMLResponse, JSONResponse

from notifier.web import pages


class OrjsonResponse(JSONResponse):
    """JSON rendered by orjson (fast, and strict about what is serialisable)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error(
    status: int,
    code: str,
    message: str,
    fields: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """Every error either listener answers: {"error": {"code", "message", "fields"}}."""
    body = {"error": {"code": code, "message": message, "fields": fields or []}}
    return OrjsonResponse(body, status_code=status, headers=headers)


def html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=pages.PAGE_HEADERS)
