"""Mail built to make a naive reader quadratic is read in one pass: anyone local can mail the
dev inbox, and a message is read as it arrives, when it opens and on its check tab, all on
the one event loop that also serves the API.

Each input is 2 MB of the pattern that made the earlier reader rescan: a regex or parser
quadratic in it needs hours (240 KB of "<head " took 79 s), a linear one well under a
second. The deadline only separates the two; speed itself is for benchmarks/.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from notifier.dev.check import links_of
from notifier.dev.inbox import verify_link
from notifier.dev.web import _framed

pytestmark = pytest.mark.anyio

HOSTILE_BYTES = 2_000_000
# Far above a linear pass over 2 MB, far below a quadratic one.
DEADLINE_SECONDS = 30


async def within_deadline(work: Callable[[], object]) -> object:
    with anyio.fail_after(DEADLINE_SECONDS):
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)


def repeated(pattern: str) -> str:
    return pattern * (HOSTILE_BYTES // len(pattern))


async def test_many_unclosed_head_tags_are_framed_in_one_pass() -> None:
    html = repeated("<head ")
    framed = await within_deadline(lambda: _framed(html))
    assert isinstance(framed, bytes) and framed.startswith(b'<base target="_blank">')


async def test_many_unclosed_anchor_tags_are_read_in_one_pass() -> None:
    found = await within_deadline(lambda: links_of(None, repeated("<a") + '<a href="http://x">'))
    assert found == ([], ["http://x"])  # the one real tag after the run is still read


async def test_many_schemes_without_a_verify_path_are_searched_in_one_pass() -> None:
    assert await within_deadline(lambda: verify_link(repeated("http://"))) is None


async def test_the_link_after_a_hostile_run_is_still_found() -> None:
    text = repeated("http://") + " http://127.0.0.1:8001/verify?token=k1.abc_-9 tail"
    link = await within_deadline(lambda: verify_link(text))
    assert link == "http://127.0.0.1:8001/verify?token=k1.abc_-9"


def test_the_head_tag_is_found_past_a_header_element() -> None:
    framed = _framed("<header>x</header><HEAD lang=en><title>t</title></HEAD>")
    assert framed.startswith(b"<header>x</header><HEAD lang=en><base target=")


def test_an_email_whose_head_never_closes_gets_the_frames_parts_first() -> None:
    assert _framed("<head never closes").startswith(b'<base target="_blank">')


def test_an_anchors_href_is_read_in_any_quoting_and_unescaped() -> None:
    html = (
        '<a class=x href="http://a.test/?x=1&amp;y=2">a</a>'
        "<A HREF='https://b.test/'>b</A><a href=http://c.test/c>c</a><a data-href=http://d>d</a>"
    )
    assert links_of(None, html)[1] == [
        "http://a.test/?x=1&y=2",
        "https://b.test/",
        "http://c.test/c",
    ]
