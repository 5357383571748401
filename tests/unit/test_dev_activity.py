"""What `notifier dev` prints of the worker's events, and of the settings it replaces."""

from __future__ import annotations

import io
import time
import uuid

from rich.console import Console

from notifier import events
from notifier.dev.activity import HOLD_SECONDS, Activity
from notifier.dev.command import ignored_settings, ready_block
from notifier.outcomes import AttemptOutcome, DeliveryStatus

VERIFICATION = uuid.UUID("bf42e925-668c-4b4d-b00d-b118ed4dbe26")


def watching() -> tuple[Activity, io.StringIO]:
    out = io.StringIO()
    return Activity(Console(file=out, highlight=False, soft_wrap=True, color_system=None)), out


def printed(*happened: events.WorkerEvent) -> list[str]:
    """The worker's lines for a verification whose "accepted" line printed already."""
    activity, out = watching()
    activity.accepted(VERIFICATION, "a***@example.com", "signup")
    for event in happened:
        activity.notice(event)
    return out.getvalue().splitlines()[1:]


def claimed(row: int = 7) -> events.Claimed:
    return events.Claimed("w", row, "notify", 1, 0.01, VERIFICATION)


def completed(
    reply: str, outcome: AttemptOutcome = "sent", status: DeliveryStatus = "sent"
) -> events.Completed:
    return events.Completed("w", 7, outcome, status, 1, 0.02, reply)


def test_a_send_prints_claimed_then_sent_with_the_reply_by_the_verifications_short_id() -> None:
    first, second = printed(claimed(), completed("250 2.0.0 Ok"))
    assert first.split()[1:] == ["claimed", "bf42e925", "attempt", "1"]
    assert second.split()[1:] == ["sent", "bf42e925", "250", "2.0.0", "Ok"]


def test_a_retry_prints_its_reply_with_any_address_in_it_redacted() -> None:
    _, retry = printed(claimed(), completed("451 <ada@example.org> busy", "transient", "pending"))
    assert "retrying" in retry and "a***@example.org" in retry
    assert "ada@example.org" not in retry


def test_a_reply_cannot_write_terminal_escapes() -> None:
    _, sent = printed(claimed(), completed("250 \x1b[2Jok"))
    assert "\x1b" not in sent and "\\x1b" in sent


def test_a_completion_of_a_row_never_seen_claimed_prints_nothing() -> None:
    assert printed(completed("250 ok")) == []


def test_dev_names_each_replaced_mail_setting_that_is_set_in_one_line() -> None:
    env = {"NOTIFIER_MAIL_FROM": "me@example.com", "NOTIFIER_SMTP_HOST": "smtp.example.com"}
    [line] = ignored_settings(env)
    assert line == (
        "ignoring NOTIFIER_MAIL_FROM, NOTIFIER_SMTP_HOST: "
        "notifier dev sends to its own inbox as notifier@localhost"
    )


def test_dev_names_no_setting_when_none_it_replaces_is_set() -> None:
    assert ignored_settings({"NOTIFIER_API_PORT": "9000"}) == []


def test_dev_names_no_setting_set_to_the_value_dev_gives_it() -> None:
    env = {"NOTIFIER_WEBHOOK_ALLOW_PRIVATE": "true", "NOTIFIER_TRANSPORT": "smtp"}
    assert ignored_settings(env) == []
    [line] = ignored_settings({"NOTIFIER_WEBHOOK_ALLOW_PRIVATE": "false"})
    assert line.startswith("ignoring NOTIFIER_WEBHOOK_ALLOW_PRIVATE: ")


def test_the_ready_block_lines_up_its_labels() -> None:
    block = ready_block([("API", "http://127.0.0.1:8000"), ("database", "postgresql://x")])
    assert block.splitlines() == [
        "notifier dev is ready",
        "  API       http://127.0.0.1:8000",
        "  database  postgresql://x",
        "Ctrl-C to stop",
    ]


def test_worker_lines_wait_for_their_verifications_accepted_line() -> None:
    activity, out = watching()
    activity.notice(claimed())
    activity.notice(completed("250 ok"))
    assert out.getvalue() == ""
    activity.accepted(VERIFICATION, "a***@example.com", "signup")
    words = [line.split()[1] for line in out.getvalue().splitlines()]
    assert words == ["accepted", "claimed", "sent"]


def test_worker_lines_whose_request_never_shows_come_out_after_a_moment() -> None:
    activity, out = watching()
    activity.notice(claimed())
    activity.release_held(now=time.monotonic())
    assert out.getvalue() == ""
    activity.release_held(now=time.monotonic() + HOLD_SECONDS)
    assert [line.split()[1] for line in out.getvalue().splitlines()] == ["claimed"]
