"""The query catalogue: runtime SQL lives in queries.sql and is looked up here by name."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@cache
def catalogue() -> dict[str, str]:
    """Every named statement in queries.sql, parsed once."""
    text = resources.files("notifier").joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    entries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in entries:
            raise ValueError(f"queries.sql names {name!r} twice")
        entries[name] = body.strip()
    return entries


def sql(name: str) -> str:
    """The statement called `name` in queries.sql."""
    try:
        return catalogue()[name]
    except KeyError:
        raise KeyError(f"queries.sql has no statement named {name!r}") from None
