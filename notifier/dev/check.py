"""The dev inbox's check of one message: its links in each part and whether the ones to
notifier dev itself answer, its verification code, its size, and its lines against RFC
5322's limits."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from html import unescape
from typing import Literal
from urllib.parse import urlsplit

import anyio

from notifier.dev.inbox import Opened

# RFC 5322 2.1.1: a line SHOULD be at most 78 characters and MUST be at most 998.
SHOULD_LINE_CHARS = 78
MUST_LINE_CHARS = 998
# How long one link's probe may take in all (seconds): connect, send, read the status line.
PROBE_SECONDS = 2.0
# Bytes of a reply read to find its status line.
STATUS_LINE_BYTES = 1024
# Links listed per part: a hostile message cannot make the check page, or its probes, large.
MAX_LINKS = 50
_TEXT_LINK = re.compile(r"https?://[^\s<>\"']+")
_STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3})")

Answer = Literal["answered", "refused", "unreachable"]


@dataclass(frozen=True, slots=True)
class Probe:
    """What a link's target said: a status code, or why there is none."""

    answer: Answer
    status: int | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Link:
    """One link target, the parts that carry it, and its probe."""

    url: str
    in_text: bool
    in_html: bool
    probe: Probe


@dataclass(frozen=True, slots=True)
class LongLine:
    """A line over SHOULD_LINE_CHARS in the message source: its number and length."""

    number: int
    length: int

    @property
    def over_limit(self) -> bool:
        return self.length > MUST_LINE_CHARS


@dataclass(frozen=True, slots=True)
class Check:
    """The check of one message, as the check tab shows it."""

    links: tuple[Link, ...]
    code: str | None
    size: int
    long_lines: tuple[LongLine, ...]
    has_text: bool
    has_html: bool

    @property
    def parts_agree(self) -> bool:
        """Whether the text and HTML parts carry the same links (true with one part)."""
        if not (self.has_text and self.has_html):
            return True
        return all(link.in_text and link.in_html for link in self.links)

    @property
    def over_998(self) -> int:
        return sum(line.over_limit for line in self.long_lines)


# An `<a ...>` tag's attributes, up to the next "<" or ">": each tag is read once, so the
# whole part is scanned once whatever it holds. (Python's HTMLParser is quadratic on some
# malformed input before 3.11.13, CVE-2025-6069, and anyone local can mail the inbox.) A
# ">" inside a quoted attribute ends the tag early: a link after it is missed, never an
# error.
_A_TAG = re.compile(r"<a\s([^<>]*)>", re.IGNORECASE)
_HREF = re.compile(r"""(?:^|\s)href\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""", re.IGNORECASE)


def links_of(text: str | None, html: str | None) -> tuple[list[str], list[str]]:
    """The http(s) links of the text part and of the HTML part's `<a href>`s, each in
    order, deduplicated, at most MAX_LINKS each."""
    in_text = list(dict.fromkeys(_TEXT_LINK.findall(text or "")))[:MAX_LINKS]
    in_html: dict[str, None] = {}
    for tag in _A_TAG.finditer(html or ""):
        href = _HREF.search(tag.group(1))
        if href is None:
            continue
        target = unescape(next(g for g in href.groups() if g is not None)).strip()
        if target.lower().startswith(("http://", "https://")):
            in_html[target] = None
            if len(in_html) == MAX_LINKS:
                break
    return in_text, list(in_html)


def probe_target(url: str, probed: frozenset[str]) -> tuple[str, int] | None:
    """The address and port to probe `url` at, or None. Only an http link to one of the
    `probed` origins (notifier dev's own listeners) at a literal loopback address or
    `localhost` (taken as 127.0.0.1, never looked up) is connected to: a link in an email
    can make notifier dev reach neither another machine nor another local service."""
    try:
        parts = urlsplit(url)
        port = parts.port or 80
    except ValueError:
        return None
    host = parts.hostname or ""
    if parts.scheme != "http" or f"http://{parts.netloc.lower()}" not in probed:
        return None
    if host == "localhost":
        return "127.0.0.1", port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return (str(address), port) if address.is_loopback else None


async def probe(url: str, probed: frozenset[str]) -> Probe:
    """GET `url` if it points to notifier dev itself, and read the status line only. GET,
    not HEAD, because the API's pages answer GET alone; it is safe for notifier's links,
    whose GET shows a page and changes nothing (confirming takes a POST)."""
    target = probe_target(url, probed)
    if target is None:
        return Probe("refused", detail="not probed: only links to notifier dev itself are")
    host, port = target
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n"
        "User-Agent: notifier-dev-check\r\n\r\n"
    ).encode("ascii", "replace")
    try:
        with anyio.fail_after(PROBE_SECONDS):
            async with await anyio.connect_tcp(host, port) as stream:
                await stream.send(request)
                head = b""
                while b"\r\n" not in head and len(head) < STATUS_LINE_BYTES:
                    head += await stream.receive(STATUS_LINE_BYTES)
    except (OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
        return Probe("unreachable", detail=type(exc).__name__)
    status = _STATUS.match(head)
    if status is None:
        return Probe("unreachable", detail="no HTTP status line")
    return Probe("answered", status=int(status.group(1)))


def long_lines(raw: bytes) -> list[LongLine]:
    """Lines of the source over SHOULD_LINE_CHARS, not counting their CRLF."""
    return [
        LongLine(number, len(line))
        for number, line in enumerate(raw.replace(b"\r\n", b"\n").split(b"\n"), start=1)
        if len(line) > SHOULD_LINE_CHARS
    ]


async def check(opened: Opened, probed: frozenset[str]) -> Check:
    """Check one message; the probes of links to `probed` origins run together, each
    within PROBE_SECONDS."""
    in_text, in_html = links_of(opened.text, opened.html)
    urls = list(dict.fromkeys([*in_text, *in_html]))
    probes: dict[str, Probe] = {}

    async def one(url: str) -> None:
        probes[url] = await probe(url, probed)

    async with anyio.create_task_group() as group:
        for url in urls:
            group.start_soon(one, url)
    text_set, html_set = set(in_text), set(in_html)
    return Check(
        links=tuple(Link(url, url in text_set, url in html_set, probes[url]) for url in urls),
        code=opened.captured.code,
        size=len(opened.raw),
        long_lines=tuple(long_lines(opened.raw)),
        has_text=opened.text is not None,
        has_html=opened.html is not None,
    )
