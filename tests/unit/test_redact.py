"""Addresses never reach logs, spans or stored errors whole."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import pytest

from notifier.redact import kept_line, printable, redact_email, redact_spellings, redact_text


def test_address_keeps_its_first_character_and_domain() -> None:
    assert redact_email("bob@example.com") == "b***@example.com"


def test_address_in_angle_brackets_keeps_the_brackets() -> None:
    assert redact_email("<bob@example.com>") == "<b***@example.com>"


@pytest.mark.parametrize(
    ("odd", "expected"),
    [
        ("", "***"),
        ("bob", "b***"),
        ("@example.com", "***@example.com"),
        ("bob@", "b***@"),
        ('"a@b"@example.com', '"***@example.com'),
        ("  bob@example.com \n", "b***@example.com"),
        ("<>", "<***>"),
        ("jösé@exämple.com", "j***@exämple.com"),
    ],
)
def test_odd_input_is_redacted_without_raising(odd: str, expected: str) -> None:
    assert redact_email(odd) == expected


def test_smtp_reply_keeps_everything_but_the_local_part() -> None:
    reply = "550 5.1.1 <bob@example.com>: Recipient address rejected"
    assert redact_text(reply) == "550 5.1.1 <b***@example.com>: Recipient address rejected"


def test_every_address_in_text_is_redacted() -> None:
    text = "from alice.smith+tag@mail.example.org to bob@example.com,carol@example.net."
    assert redact_text(text) == "from a***@mail.example.org to b***@example.com,c***@example.net."


def test_adjacent_addresses_do_not_leak_through_each_others_domain() -> None:
    redacted = redact_text("alice@example.com/bob@example.net")
    assert "bob" not in redacted
    assert "alice" not in redacted


def test_text_without_addresses_is_unchanged() -> None:
    text = "451 4.3.0 try again later (queue @ capacity)"
    assert redact_text(text) == text


# -- linear whatever a stranger sends (invariant 15) ---------------------------------------------

# Text no address pattern can finish, in the shapes that made the old pattern quadratic: a
# long run without an "@", runs a space apart, and "@[" literals that never close.
HOSTILE_SHAPES = {
    "one run": "a" * 1_000_000,
    "runs": "a a" * 333_333,
    "open literals": "a@[a" * 250_000,
    "ats": "a@" * 500_000,
}
CHUNK = 1_000
# A linear path may take this many times what a thousand-character chunk's cost, times the
# number of chunks, predicts; a quadratic one takes a thousand times that.
SLACK = 100


def _trim(text: str) -> str:
    from notifier.delivery.smtp_replies import kept_text as trim

    return trim(text)


def _scrubbed(text: str) -> str:
    from notifier.logs import scrub

    return scrub(text)


def _known_spellings(text: str) -> str:
    from notifier.addresses import spellings

    return redact_spellings(text, spellings("ada.lovelace+x@corp.example"))


PATHS: dict[str, Callable[[str], str]] = {
    "redact_text": redact_text,
    "log scrubbing": _scrubbed,
    "a mail server's reply": _trim,
    "printable": printable,
    "known spellings": _known_spellings,
}


def _timed(path: Callable[[str], str], text: str, out: Any) -> None:
    started = time.perf_counter()
    path(text)
    out.put(time.perf_counter() - started)


@pytest.mark.parametrize("shape", list(HOSTILE_SHAPES))
@pytest.mark.parametrize("path", list(PATHS))
def test_a_megabyte_of_hostile_text_costs_linear_time_on_every_redaction_path(
    path: str, shape: str
) -> None:
    text, run = HOSTILE_SHAPES[shape], PATHS[path]
    chunk = text[:CHUNK]
    started = time.perf_counter()
    for _ in range(len(text) // CHUNK):
        run(chunk)
    linear = time.perf_counter() - started
    # In a child process, so a quadratic path is stopped at its bound instead of running for
    # the hour it would take (a regex cannot be interrupted).
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_timed, args=(run, text, out))
    child.start()
    child.join(max(SLACK * linear, 1.0))
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"{path} took over {SLACK} times its linear cost on {shape}")
    assert out.get(timeout=5) <= max(SLACK * linear, 1.0)


def test_a_long_reply_is_cut_after_it_is_redacted_so_no_partial_address_survives() -> None:
    from notifier.delivery.smtp_replies import REPLY_LIMIT_CHARS

    reply = "550 " + "x" * (REPLY_LIMIT_CHARS - 20) + " <ada.lovelace@corp.example> unknown"
    kept = _trim(reply)
    assert len(kept) <= REPLY_LIMIT_CHARS and "lovelace" not in kept and "ada.lov" not in kept


def test_printable_writes_controls_and_invisible_characters_as_escapes() -> None:
    assert printable("a\x1b[2Jb\nc\u202ed\u200be") == "a\\x1b[2Jb\\nc\\u202ed\\u200be"


def test_printable_leaves_ordinary_text_alone() -> None:
    text = "550 5.1.1 <jösé@exämple.com>: user unknown (retry later) 100%"
    assert printable(text) == text


def test_known_spellings_are_replaced_whatever_their_case() -> None:
    from notifier.addresses import spellings

    text = "550 5.1.1 <E}ADA{X@corp.example> e}ada{x is unknown"
    assert redact_spellings(text, spellings("e}ada{x@corp.example")) == (
        "550 5.1.1 <E***@corp.example> e*** is unknown"
    )


def test_a_reply_naming_no_spelling_is_returned_as_it_is() -> None:
    from notifier.addresses import spellings

    text = "250 2.0.0 Ok: queued as 4Bx9"
    assert redact_spellings(text, spellings("ada.lovelace@corp.example")) is text


def test_a_spelling_in_a_reply_with_non_ascii_text_is_still_replaced_whatever_its_case() -> None:
    from notifier.addresses import spellings

    text = "550 5.1.1 ADA.LOVELACE unbekannt: Empfänger abgelehnt"
    assert redact_spellings(text, spellings("ada.lovelace@corp.example")) == (
        "550 5.1.1 A*** unbekannt: Empfänger abgelehnt"
    )


def test_a_kept_line_is_one_line_escaped_redacted_and_bounded() -> None:
    kept = kept_line("550 5.1.1 <ada@example.org>\r\n  no such\x1b[2J user " + "x" * 5000, 80)
    assert "\n" not in kept and "\x1b" not in kept and "\\x1b" in kept
    assert "ada@example.org" not in kept
    assert kept.startswith("550 5.1.1 <") and len(kept) == 80
