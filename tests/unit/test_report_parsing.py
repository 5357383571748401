"""What a report mailed back to a return path says, in the one normalised shape."""

from __future__ import annotations

import pytest

from notifier.inbound.parsing import reports_in
from notifier.reports import Report, ours_to_fix, recipients_own
from tests.support.reports import arf, dsn

TO = "bounce+7.0123456789abcdef@bounces.example.com"


def one(raw: bytes) -> Report:
    [report] = reports_in(raw, 7)
    return report


def test_a_permanent_bounce_is_read_from_a_postfix_dsn() -> None:
    report = one(dsn(TO, "ada@example.org"))
    assert (report.kind, report.bounce_type, report.status, report.source) == (
        "bounced",
        "permanent",
        "5.1.1",
        "dsn",
    )
    assert report.diagnostic is not None and "User unknown" in report.diagnostic
    assert "ada@example.org" not in report.diagnostic  # redacted like every reply


@pytest.mark.parametrize(
    ("action", "status", "kind", "bounce_type"),
    [
        ("failed", "4.4.1", "bounced", "transient"),
        ("failed", "", "bounced", "undetermined"),
        ("delayed", "4.4.1", "deferred", None),
        ("delivered", "2.0.0", "delivered", None),
        ("relayed", "2.0.0", "delivered", None),
    ],
)
def test_each_action_and_status_is_one_kind(
    action: str, status: str, kind: str, bounce_type: str | None
) -> None:
    report = one(dsn(TO, "ada@example.org", action=action, status=status))
    assert (report.kind, report.bounce_type) == (kind, bounce_type)


def test_the_same_dsn_has_the_same_report_id() -> None:
    raw = dsn(TO, "ada@example.org", message_id="<same@relay.example.net>")
    assert one(raw).report_id == one(raw).report_id


def test_a_feedback_report_is_a_complaint() -> None:
    report = one(arf(TO, "ada@example.org"))
    assert (report.kind, report.source) == ("complained", "arf")


def test_a_not_spam_feedback_report_is_no_complaint() -> None:
    assert one(arf(TO, "ada@example.org", feedback_type="not-spam")).kind == "bounced"


def test_a_message_in_no_standard_shape_is_an_undetermined_bounce() -> None:
    raw = b"From: someone@example.org\r\nSubject: I am on holiday\r\n\r\nBack Monday.\r\n"
    report = one(raw)
    assert (report.kind, report.bounce_type, report.source) == ("bounced", "undetermined", "mail")


def test_a_malformed_report_is_read_without_raising() -> None:
    raw = b"Content-Type: multipart/report; report-type=delivery-status; boundary=x\r\n\r\n--x"
    assert one(raw).bounce_type == "undetermined"


@pytest.mark.parametrize(
    ("status", "own", "ours"),
    [
        ("5.1.1", True, False),
        ("5.2.2", True, False),
        ("5.1.7", False, False),
        ("5.7.1", False, True),
        ("5.6.0", False, True),
        ("5.0.0", False, False),
        (None, False, False),
    ],
)
def test_only_the_recipients_own_mailbox_status_suppresses(
    status: str | None, own: bool, ours: bool
) -> None:
    assert (recipients_own(status), ours_to_fix(status)) == (own, ours)
