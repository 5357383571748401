"""Logging: JSON lines for machines, readable lines for dev; addresses and tokens never pass.

Every record goes through a filter that redacts email addresses and masks anything shaped
like a verification token, whatever the code that logged it put in the message, so invariant
9 does not depend on every call site being careful.
"""

from __future__ import annotations

import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from opentelemetry import trace

from notifier.redact import redact_text

LogFormat = Literal["json", "text"]

# A verification token (key id, dot, 43 URL-safe characters), also inside a URL.
_TOKEN = re.compile(r"\b[0-9a-f]{8}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")
TOKEN_MASK = "[token]"
# Fields a log call may attach with extra={...}; they become top-level JSON keys.
CONTEXT_FIELDS = ("verification_id", "outbox_id", "correlation_id", "attempt", "lease_owner")
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


def scrub(text: str) -> str:
    """The text with tokens masked and email addresses redacted."""
    return redact_text(_TOKEN.sub(TOKEN_MASK, text))


class Scrubber(logging.Filter):
    """Rewrites each record's message (with its arguments applied) through `scrub`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = scrub(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, context, trace ids."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, int | float | bool) else scrub(str(value))
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            entry["trace_id"] = format(span.trace_id, "032x")
            entry["span_id"] = format(span.span_id, "016x")
            entry.setdefault("correlation_id", entry["trace_id"])
        if record.exc_text:
            entry["exception"] = record.exc_text
        return orjson.dumps(entry).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")


def configure_logging(fmt: LogFormat = "json", level: int = logging.INFO) -> None:
    """Send every log record to stderr, scrubbed, in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(Scrubber())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # aiosmtpd narrates every SMTP command (with addresses) at INFO.
    logging.getLogger("mail.log").setLevel(logging.WARNING)
