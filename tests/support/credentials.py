"""URLs as someone without the embedded server's password would hold them."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def without_credentials(url: str) -> str:
    """The URL with no password and no password file: what someone without either has."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("passfile", "password")]
    netloc = parts.netloc.rpartition("@")[2]
    user = (parts.username or "postgres") + "@"
    return urlunsplit(parts._replace(netloc=user + netloc, query=urlencode(query)))


def socket_dir_of(url: str) -> Path:
    return Path(dict(parse_qsl(urlsplit(url).query))["host"])


def passfile_of(url: str) -> Path | None:
    named = dict(parse_qsl(urlsplit(url).query)).get("passfile")
    return Path(named) if named else None
