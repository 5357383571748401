"""The soak's query catalogue (queries.sql), looked up by name like the product's."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@cache
def _catalogue() -> dict[str, str]:
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def sql(name: str) -> str:
    """The statement called `name` in the soak's queries.sql."""
    return _catalogue()[name]
