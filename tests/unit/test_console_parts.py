"""The console's parts that need no database: its chart, trace ids, its setting, CSRF tokens."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime

import pytest

from notifier.config import ApiSettings
from notifier.errors import ConfigError
from notifier.tokens import TokenKeys
from notifier.web.access import Sessions
from notifier.web.console.charts import Bar, axis_top, stacked_bars
from notifier.web.console.data import QueueSnapshot, trace_id
from notifier.web.console.pages import Viewer, queue_page

SECRET = "s" * 40
SERIES = (("sent", "Sent"), ("failed", "Failed"))


@pytest.mark.parametrize(
    ("largest", "top"), [(0, 1), (1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (51, 100), (999, 1000)]
)
def test_the_value_axis_ends_at_the_next_1_2_or_5(largest: int, top: int) -> None:
    assert axis_top(largest) == top


def rects(svg: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'(\w+)="([^"]*)"', r)) for r in re.findall(r"<rect [^>]*>", svg)]


def test_bars_are_stacked_in_proportion_to_the_axis() -> None:
    svg = stacked_bars([Bar("a", (3, 1)), Bar("b", (5, 0))], SERIES, "two bars", ("x", "y"))
    drawn = rects(svg)
    # The axis ends at 5: 3 sent is 60% of the height, 1 failed sits on top of it.
    assert [(r["class"], r["y"], r["height"]) for r in drawn] == [
        ("sent", "40.000", "60.000"),
        ("failed", "20.000", "20.000"),
        ("sent", "0.000", "100.000"),
    ]
    assert drawn[2]["x"] == "1.1"  # the second slot, past its share of the gap


def test_an_empty_minute_draws_no_bar() -> None:
    svg = stacked_bars([Bar("quiet", (0, 0))], SERIES, "nothing", ())
    assert rects(svg) == [] and "<title>" not in svg


def test_the_chart_is_named_for_assistive_technology_and_escapes_its_text() -> None:
    svg = stacked_bars([Bar("<b>", (1, 0))], SERIES, 'say "hi" <now>', ("<t>",))
    assert 'role=img aria-label="say &quot;hi&quot; &lt;now&gt;"' in svg
    assert "<figcaption>say &quot;hi&quot; &lt;now&gt;</figcaption>" in svg
    assert "<title>&lt;b&gt;</title>" in svg and "<span>&lt;t&gt;</span>" in svg


def test_a_trace_id_is_read_from_a_w3c_traceparent() -> None:
    assert (
        trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        == "4bf92f3577b34da6a3ce929d0e0e4736"
    )


@pytest.mark.parametrize(
    "traceparent",
    [
        None,
        "",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # the invalid trace id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # not lowercase hex
        '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"><script>',
    ],
)
def test_anything_else_is_no_trace_id(traceparent: str | None) -> None:
    assert trace_id(traceparent) is None


def test_the_trace_url_template_is_read_from_the_environment() -> None:
    template = "http://jaeger:16686/trace/{trace_id}"
    assert ApiSettings.from_env({}).trace_url_template is None
    assert (
        ApiSettings.from_env({"NOTIFIER_TRACE_URL_TEMPLATE": template}).trace_url_template
        == template
    )


@pytest.mark.parametrize(
    "template",
    [
        "http://jaeger:16686/trace/",  # nowhere for the id
        "javascript:alert('{trace_id}')",
        "http://jaeger/{trace_id}/{trace_id}",
        "http://jaeger/{span_id}/{trace_id}",
    ],
)
def test_a_trace_url_template_without_one_placeholder_is_refused(template: str) -> None:
    with pytest.raises(ConfigError, match="NOTIFIER_TRACE_URL_TEMPLATE"):
        ApiSettings.from_env({"NOTIFIER_TRACE_URL_TEMPLATE": template})


def test_a_csrf_token_belongs_to_its_session() -> None:
    sessions = Sessions(TokenKeys((SECRET,)))
    mine, theirs = sessions.issue("0123456789ab"), sessions.issue("ba9876543210")
    token = sessions.csrf_token(mine)
    assert sessions.csrf_valid(mine, token)
    assert not sessions.csrf_valid(theirs, token)
    assert not sessions.csrf_valid(mine, sessions.csrf_token(theirs))


def test_a_csrf_token_is_not_the_session_signature() -> None:
    # The cookie's own MAC must not double as a token (nor the other way round).
    sessions = Sessions(TokenKeys((SECRET,)))
    cookie = sessions.issue("0123456789ab")
    assert sessions.csrf_token(cookie) not in cookie


@pytest.mark.parametrize("token", ["", "x", "\u00ff.abc", "{kid}.\u00ff", "{kid}."])
def test_a_malformed_csrf_token_is_refused_without_an_error(token: str) -> None:
    keys = TokenKeys((SECRET,))
    sessions = Sessions(keys)
    cookie = sessions.issue("0123456789ab")
    assert not sessions.csrf_valid(cookie, token.replace("{kid}", keys.current_key_id))


EMPTY_QUEUE = QueueSnapshot(
    pending=0, pending_due=0, sending=0, expired_leases=0, oldest_pending_seconds=0.0, minutes=()
)
VIEWER = Viewer("ops", admin=True, csrf="")


def test_an_empty_queue_reads_nothing_pending_not_an_age_of_zero() -> None:
    page = queue_page(EMPTY_QUEUE, VIEWER, datetime.now(UTC))
    assert "Nothing pending" in page and "0.0 s" not in page


def test_an_idle_hour_reads_as_zero_a_minute_not_none() -> None:
    page = queue_page(EMPTY_QUEUE, VIEWER, datetime.now(UTC))
    assert "none a minute" not in page and "none" not in re.sub(r"<[^>]+>", " ", page).split()


def test_rows_waiting_for_a_later_retry_read_none_due_yet() -> None:
    later = dataclasses.replace(EMPTY_QUEUE, pending=2)
    page = queue_page(later, VIEWER, datetime.now(UTC))
    assert "None due yet" in page and "Nothing pending" not in page


def test_a_due_row_shows_how_long_it_has_waited() -> None:
    waiting = dataclasses.replace(EMPTY_QUEUE, pending=1, pending_due=1, oldest_pending_seconds=2.5)
    assert "2.5 s" in queue_page(waiting, VIEWER, datetime.now(UTC))


def test_beside_notifier_devs_inbox_the_console_links_back_to_it() -> None:
    beside = queue_page(EMPTY_QUEUE, dataclasses.replace(VIEWER, inbox=True), datetime.now(UTC))
    assert '<a id=nav-inbox href="/dev/inbox">Inbox</a>' in beside
    assert "nav-inbox" not in queue_page(EMPTY_QUEUE, VIEWER, datetime.now(UTC))
