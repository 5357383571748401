"""Where a webhook may go: the endpoint URL's shape, and which addresses it may reach.

Webhooks are requests notifier makes on an operator's behalf, so a URL that resolves to the
machine itself or its private network would let whoever registers endpoints (or controls
their DNS) reach inside (server-side request forgery). Unless NOTIFIER_WEBHOOK_ALLOW_PRIVATE
is set: the URL must be https, and every address its host resolves to must be public, both
when it is registered and at each send, which then connects to the very address it checked
(no second lookup a rebinding DNS server could answer differently).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

from notifier.errors import NotifierError

MAX_URL_LENGTH = 2048
# IPv6 prefixes that carry an IPv4 address inside (NAT64, 6to4): judged by that address.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Local-use NAT64 (RFC 8215): its translator may embed the IPv4 address at any RFC 6052
# offset, so no reading of it is safe; and site-local, deprecated but still routed on some
# networks, which Python 3.11 counts as neither private nor reserved.
_INTERNAL_IPV6 = (ipaddress.ip_network("64:ff9b:1::/48"), ipaddress.ip_network("fec0::/10"))

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(NotifierError):
    """An endpoint URL, or an address it resolves to, that webhooks may not go to."""


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str  # as in the URL, lowercase; an IPv6 literal without brackets
    port: int


def check_url(url: str, allow_private: bool) -> Target:
    """The target of `url`, or TargetRefused saying what is wrong with it."""
    if len(url) > MAX_URL_LENGTH:
        raise TargetRefused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if any(c.isspace() or ord(c) < 0x21 or c == "\\" for c in url) or not url.isascii():
        raise TargetRefused("the URL has spaces, control or non-ASCII characters (use IDNA)")
    parts = urlsplit(url)
    allowed = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in allowed:
        raise TargetRefused("the URL must be https (http only with NOTIFIER_WEBHOOK_ALLOW_PRIVATE)")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("the URL may not carry credentials")
    if parts.fragment:
        raise TargetRefused("the URL may not have a fragment")
    host = (parts.hostname or "").lower()
    if not host:
        raise TargetRefused("the URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TargetRefused("the URL's port is not a port") from None
    target = Target(parts.scheme, host, port)
    literal = _literal(host)
    if literal is not None and not allow_private:
        reason = forbidden(literal)
        if reason is not None:
            raise TargetRefused(f"{host} is {reason}")
    return target


def forbidden(address: IPAddress) -> str | None:
    """Why webhooks may not go to `address` (None: a public address they may reach)."""
    if isinstance(address, ipaddress.IPv6Address):
        if any(address in network for network in _INTERNAL_IPV6):
            return "an internal IPv6 address (local-use NAT64 or site-local)"
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            return forbidden(inner)
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (cloud metadata lives there)"
    if address.is_private:
        return "a private address"
    if address.is_multicast or address.is_unspecified or address.is_reserved:
        return "not a unicast address"
    if not address.is_global:
        return "not a public address"
    return None


async def resolve(target: Target, allow_private: bool) -> list[IPAddress]:
    """Every address `target`'s host resolves to, each one allowed; else TargetRefused
    (a host with any forbidden address is refused whole: its DNS can pick which one
    a client uses)."""
    literal = _literal(target.host)
    if literal is not None:
        found = [literal]
    else:
        try:
            infos = await anyio.getaddrinfo(
                target.host, target.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
        except OSError as exc:
            raise TargetRefused(f"{target.host} does not resolve ({exc})") from None
        addresses = (_literal(str(info[4][0])) for info in infos)
        found = list(dict.fromkeys(a for a in addresses if a is not None))
    if not found:
        raise TargetRefused(f"{target.host} resolves to no address")
    if not allow_private:
        for address in found:
            reason = forbidden(address)
            if reason is not None:
                raise TargetRefused(f"{target.host} resolves to {address}, {reason}")
    return found


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
