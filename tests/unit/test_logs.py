"""Log lines: JSON with context, and never a token or a full address, whoever logged them."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from notifier.logs import JsonFormatter, Scrubber, TextFormatter, scrub

TOKEN = "0123abcd." + "Q" * 43


def test_scrub_masks_tokens_and_redacts_addresses() -> None:
    line = f"sent https://x.test/verify?token={TOKEN} to ada@example.com"
    assert scrub(line) == "sent https://x.test/verify?token=[token] to a***@example.com"


@pytest.fixture
def capture() -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(Scrubber())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("notifier.test.logs")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, stream


def test_json_line_carries_context_and_scrubs_arguments(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    logger.info(
        "delivered to %s with %s", "bob@example.com", TOKEN, extra={"verification_id": "v-1"}
    )
    entry = orjson.loads(stream.getvalue())
    assert entry["msg"] == "delivered to b***@example.com with [token]"
    assert (entry["level"], entry["logger"], entry["verification_id"]) == (
        "info",
        "notifier.test.logs",
        "v-1",
    )


def test_exception_text_is_scrubbed_too(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    try:
        raise ValueError(f"bad token {TOKEN} for carol@example.com")
    except ValueError:
        logger.exception("failed")
    entry = orjson.loads(stream.getvalue())
    assert TOKEN not in entry["exception"] and "carol@example.com" not in entry["exception"]
    assert "[token]" in entry["exception"]


def test_text_format_is_one_readable_line() -> None:
    record = logging.LogRecord(
        "notifier.x", logging.INFO, __file__, 1, "hello %s", ("a@b.com",), None
    )
    Scrubber().filter(record)
    line = TextFormatter().format(record)
    assert line.endswith("INFO    notifier.x: hello a***@b.com")
