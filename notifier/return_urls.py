"""Where a person goes back to after Confirm: the allow-list a `return_to` is checked against,
and the signed redirect the app can trust without calling back.

A prefix is `scheme://host[:port][/path]`, the host optionally `*.` and a domain (one more
label, exactly). A URL matches when its scheme, host and port are the prefix's and its path
is the prefix's path or below it (`/welcome` allows `/welcome` and `/welcome/next`, never
`/welcomeback`). Anything unusual in a URL (credentials, backslashes, dot segments, encoded
slashes or dots, control characters, our own parameter names) is refused, never repaired.

After Confirm the public page answers 303 to the `return_to` with `verification_id`,
`outcome` (verified or already_verified), `expires` (Unix seconds, a few minutes ahead) and
`signature`: `<key id>.<base64url HMAC-SHA256 of "{verification_id}.{outcome}.{expires}">`
under the client's return secret, itself derived from NOTIFIER_TOKEN_SECRET and the API key
id (`notifier keys return-secret KEY_ID` prints it for apps in other languages).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args
from urllib.parse import SplitResult, parse_qs, urlencode, urlsplit

from notifier.errors import NotifierError
from notifier.tokens import TokenKeys, UnknownKeyError

MAX_LENGTH = 2048
# How long a signed redirect is good for: the person's browser follows it at once.
SIGNATURE_SECONDS = 600
ReturnOutcome = Literal["verified", "already_verified"]
RETURN_OUTCOMES: tuple[ReturnOutcome, ...] = get_args(ReturnOutcome)
# The parameters notifier adds; a return_to that already has one is refused.
PARAMETERS = ("verification_id", "outcome", "expires", "signature")
_SECRET_CONTEXT = b"notifier.return-secret.v1"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
# Refused anywhere in a URL: controls, spaces, backslashes; in its path: ways of hiding a
# dot segment or a slash from a prefix check (encoded; "..;" as Tomcat and Spring read it;
# IIS's %u; an empty segment) and encoded control characters.
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")
_HIDDEN_PATH = re.compile(
    r"%2e|%2f|%5c|%[01][0-9a-f]|%7f|%u|//|(^|/)\.{1,2}(;[^/]*)?(/|$)", re.IGNORECASE
)


class InvalidReturn(NotifierError):
    """A return_to not on the allow-list, or a redirect whose signature does not hold."""


@dataclass(frozen=True, slots=True)
class Prefix:
    scheme: str
    host: str  # lowercase; after "*." when wildcard
    wildcard: bool
    port: int
    path: str

    @classmethod
    def parse(cls, text: str) -> Prefix:
        parts = _split(text.strip())
        if parts.query or parts.fragment:
            raise ValueError(f"{text!r}: a prefix has no query or fragment")
        host = parts.hostname or ""
        wildcard = host.startswith("*.")
        if wildcard:
            host = host[2:]
        _check_host(host, text)
        return cls(parts.scheme, host, wildcard, _port(parts), parts.path or "/")

    def allows(self, scheme: str, host: str, port: int, path: str) -> bool:
        if scheme != self.scheme or port != self.port:
            return False
        if self.wildcard:
            label, dot, rest = host.partition(".")
            if not dot or rest != self.host or _LABEL.match(label) is None:
                return False
        elif host != self.host:
            return False
        if self.path.endswith("/"):
            return path.startswith(self.path)
        return path == self.path or path.startswith(self.path + "/")

    def __str__(self) -> str:
        host = ("*." if self.wildcard else "") + self.host
        default = _DEFAULT_PORTS[self.scheme] == self.port
        return f"{self.scheme}://{host}{'' if default else f':{self.port}'}{self.path}"


@dataclass(frozen=True, slots=True)
class ReturnUrls:
    """The allow-list (NOTIFIER_RETURN_URLS); empty: no return_to is accepted."""

    prefixes: tuple[Prefix, ...] = ()

    @classmethod
    def parse(cls, raw: str) -> ReturnUrls:
        """Prefixes separated by commas or spaces."""
        return cls(tuple(Prefix.parse(p) for p in re.split(r"[,\s]+", raw) if p))

    def check(self, url: str, narrowed_to: Sequence[str] | None = None) -> str:
        """`url` if this list (and `narrowed_to`, an API key's own prefixes, when given)
        allows it; InvalidReturn saying why not, otherwise."""
        if not self.prefixes:
            raise InvalidReturn("return_to is not accepted: NOTIFIER_RETURN_URLS is empty")
        if len(url) > MAX_LENGTH:
            raise InvalidReturn(f"return_to is longer than {MAX_LENGTH} characters")
        try:
            parts = _split(url)
            host = parts.hostname or ""
            _check_host(host, url)
            port = _port(parts)
        except ValueError as exc:
            raise InvalidReturn(f"return_to is not a plain URL: {exc}") from None
        path = parts.path or "/"
        if _HIDDEN_PATH.search(path):
            raise InvalidReturn("return_to's path has dot segments or encoded slashes or dots")
        taken = set(parse_qs(parts.query, keep_blank_values=True)) & set(PARAMETERS)
        if taken:
            raise InvalidReturn(f"return_to may not carry {', '.join(sorted(taken))} itself")
        lists = [self.prefixes]
        if narrowed_to is not None:
            lists.append(tuple(Prefix.parse(p) for p in narrowed_to))
        for prefixes in lists:
            if not any(p.allows(parts.scheme, host, port, path) for p in prefixes):
                raise InvalidReturn("return_to is not under any allowed return URL")
        return url

    def __str__(self) -> str:
        return ", ".join(str(p) for p in self.prefixes)


def _split(text: str) -> SplitResult:
    if _UNSAFE.search(text):
        raise ValueError("it has spaces, control characters or backslashes")
    parts = urlsplit(text)
    if parts.scheme not in _DEFAULT_PORTS:
        raise ValueError("only http and https URLs")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("no credentials in a URL")
    return parts


def _check_host(host: str, text: str) -> None:
    labels = host.split(".")
    if not host or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{text!r} has no plain host name (lowercase letters, digits, -)")


def _port(parts: SplitResult) -> int:
    port = parts.port  # ValueError for a port out of range
    return _DEFAULT_PORTS[parts.scheme] if port is None else port


# -- the signed redirect ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Returned:
    """What a checked redirect says: this verification ended so."""

    verification_id: uuid.UUID
    outcome: ReturnOutcome


def return_secret(keys: TokenKeys, key_id: str, client_id: str | None) -> bytes:
    """The secret the redirects of `client_id`'s verifications (None: the library's own)
    are signed with under token secret `key_id`."""
    return keys.derived_key(key_id, _SECRET_CONTEXT, (client_id or "").encode())


def return_secrets(keys: TokenKeys, client_id: str | None) -> list[tuple[str, str]]:
    """(key id, base64url secret) for every configured token secret, newest first: what an
    app in another language checks signatures with."""
    return [(kid, _b64(return_secret(keys, kid, client_id))) for kid in keys.key_ids_newest_first]


def signed_return(
    return_to: str,
    verification_id: uuid.UUID,
    outcome: ReturnOutcome,
    keys: TokenKeys,
    client_id: str | None,
    now: float | None = None,
) -> str:
    """`return_to` with the parameters that tell the app what happened, signed."""
    expires = int(now if now is not None else time.time()) + SIGNATURE_SECONDS
    kid = keys.current_key_id
    mac = _mac(return_secret(keys, kid, client_id), verification_id, outcome, expires)
    query = urlencode(
        {
            "verification_id": str(verification_id),
            "outcome": outcome,
            "expires": str(expires),
            "signature": f"{kid}.{mac}",
        }
    )
    base, hash_mark, fragment = return_to.partition("#")
    if base.endswith("?"):  # an empty query: ours is the whole of it
        base = base[:-1]
    joined = f"{base}{'&' if urlsplit(base).query else '?'}{query}"
    return joined + hash_mark + fragment


def check_return(
    url: str, keys: TokenKeys, *, client_id: str | None = None, now: float | None = None
) -> Returned:
    """What a redirect from notifier says, once its signature and freshness hold; else
    InvalidReturn. `client_id`: the API key id that requested the verification (None: it
    was requested with the library call)."""
    query = parse_qs(urlsplit(url).query, keep_blank_values=True)
    values = {name: query.get(name, []) for name in PARAMETERS}
    if any(len(v) != 1 for v in values.values()):
        raise InvalidReturn("the URL does not carry one of each of " + ", ".join(PARAMETERS))
    raw_id, outcome, expires_text, signature = (values[n][0] for n in PARAMETERS)
    try:
        verification_id = uuid.UUID(raw_id)
        expires = int(expires_text)
    except ValueError:
        raise InvalidReturn("the URL's verification_id or expires is malformed") from None
    if outcome not in RETURN_OUTCOMES:
        raise InvalidReturn(f"unknown outcome {outcome!r}")
    kid, _, mac = signature.partition(".")
    try:
        secret = return_secret(keys, kid, client_id)
    except UnknownKeyError:
        raise InvalidReturn("the signature names a secret that is not configured") from None
    expected = _mac(secret, verification_id, outcome, expires)
    if not hmac.compare_digest(expected.encode(), mac.encode()):
        raise InvalidReturn("the signature does not match")
    if expires < (now if now is not None else time.time()):
        raise InvalidReturn("the signature has expired")
    return Returned(verification_id, outcome)


def _mac(secret: bytes, verification_id: uuid.UUID, outcome: str, expires: int) -> str:
    message = f"{verification_id}.{outcome}.{expires}".encode()
    return _b64(hmac.new(secret, message, hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
