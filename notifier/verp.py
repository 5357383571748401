"""The return path that names its delivery: `bounce+<outbox id>.<MAC>@<bounce domain>`
(VERP). A report that comes back to it says which delivery it is about, and its MAC (HMAC
under the token secret, 64 bits, lowercase hex, since relays may lowercase a local part)
proves notifier made the address: a forged report names no delivery and changes nothing.
"""

from __future__ import annotations

import hmac
import re

from notifier.tokens import TokenKeys

PREFIX = "bounce+"
_CONTEXT = b"notifier.verp.v1"
_MAC_CHARS = 16
# An outbox id (bigint: at most 19 digits), a dot, the MAC.
_LOCAL = re.compile(rf"bounce\+([1-9][0-9]{{0,18}})\.([0-9a-f]{{{_MAC_CHARS}}})")


def return_path(keys: TokenKeys, outbox_id: int, domain: str) -> str:
    """The envelope sender of delivery `outbox_id`, under the newest secret."""
    mac = keys.digest(_CONTEXT, str(outbox_id).encode()).hex()[:_MAC_CHARS]
    return f"{PREFIX}{outbox_id}.{mac}@{domain}"


def outbox_of(keys: TokenKeys, address: str, domain: str) -> int | None:
    """The delivery a return path names, when notifier made it (under any configured
    secret) for `domain`; None for anything else, in time linear in the address."""
    local, at, host = address.strip().strip("<>").rpartition("@")
    if not at or host.lower().rstrip(".") != domain.lower().rstrip("."):
        return None
    match = _LOCAL.fullmatch(local.lower())
    if match is None:
        return None
    outbox_id = int(match[1])
    expected = [d.hex()[:_MAC_CHARS] for d in keys.digests(_CONTEXT, match[1].encode())]
    if not any(hmac.compare_digest(e, match[2]) for e in expected):
        return None
    return outbox_id
