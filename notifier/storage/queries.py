"""The query catalogue: runtime SQL lives in queries.sql and is looked up here by name."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache, cached_property
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
# A parameter of a plpgsql function bound by name: `p_user_id => $2`.
_NAMED = re.compile(r"\b([a-z_][a-z0-9_]*)\s*=>\s*\$(\d+)")


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


PRODUCT = Catalogue("notifier.storage", "queries.sql")


def catalogue() -> dict[str, str]:
    """Every named statement in queries.sql, parsed once."""
    return PRODUCT.entries


def sql(name: str) -> str:
    """The statement called `name` in queries.sql."""
    return PRODUCT.sql(name)


@cache  # the catalogue is fixed: parsed once a statement, not once a call
def bound_names(name: str) -> dict[int, str]:
    """Which function parameter each `$n` of statement `name` binds (named notation)."""
    return {int(n): param for param, n in _NAMED.findall(sql(name))}


def arguments(name: str, values: Mapping[str, object]) -> list[object]:
    """The positional arguments of statement `name`, from `values` keyed by the function
    parameters its `$n` bind (`p_user_id => $2`): no two values can swap places unseen,
    and a name missing or left over is an error before anything is sent."""
    names = bound_names(name)
    if set(values) != set(names.values()) or sorted(names) != list(range(1, len(names) + 1)):
        missing = sorted(set(names.values()) - set(values))
        extra = sorted(set(values) - set(names.values()))
        raise TypeError(f"{name}: missing {missing}, unknown {extra}")
    return [values[names[n]] for n in range(1, len(names) + 1)]
