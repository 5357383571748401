"""The query catalogue: runtime SQL lives in queries.sql and is looked up here by name."""

from __future__ import annotations

import re
from functools import cached_property
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class Catalogue:
    """The named statements of one SQL file shipped in a package, parsed on first use.

    Each statement opens with a `-- name: <name>` header; the product's is
    notifier/queries.sql, and the test suite reads its own files the same way.
    """

    def __init__(self, package: str, file: str) -> None:
        self.package = package
        self.file = file

    @cached_property
    def entries(self) -> dict[str, str]:
        text = resources.files(self.package).joinpath(self.file).read_text(encoding="utf-8")
        parts = _HEADER.split(text)
        # parts = [preamble, name1, body1, name2, body2, ...]
        entries: dict[str, str] = {}
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in entries:
                raise ValueError(f"{self.file} names {name!r} twice")
            entries[name] = body.strip()
        return entries

    def sql(self, name: str) -> str:
        """The statement called `name`."""
        try:
            return self.entries[name]
        except KeyError:
            raise KeyError(f"{self.file} has no statement named {name!r}") from None


PRODUCT = Catalogue("notifier", "queries.sql")


def catalogue() -> dict[str, str]:
    """Every named statement in queries.sql, parsed once."""
    return PRODUCT.entries


def sql(name: str) -> str:
    """The statement called `name` in queries.sql."""
    return PRODUCT.sql(name)
