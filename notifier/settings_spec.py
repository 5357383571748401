"""How a setting is declared, parsed and read: the machinery behind notifier.config.

A setting is a dataclass field declared with `setting(...)`: its environment variable, how
its text is parsed and checked, its default, its unit and what it means, all in one place.
`load` reads a whole group of them from the environment, and is the only code that does;
`describe_settings` turns the declarations into the lines `--help` shows.
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from notifier.errors import ConfigError

Env = Mapping[str, str]
Parser = Callable[[str], Any]
S = TypeVar("S")

_SPEC = "notifier.setting"


@dataclass(frozen=True, slots=True)
class Setting:
    """One environment variable: its name, parser, unit and meaning."""

    name: str
    parse: Parser
    doc: str
    # What the number counts, for help and docs ("s", "bytes", "rows", ...).
    unit: str | None = None
    # Never echo the value in an error.
    secret: bool = False
    # An empty value is a value (say, no separators), not "unset".
    empty: bool = False
    # How the default reads when the field's default is not the whole story ("the From
    # address's domain", "unset").
    default_text: str | None = None


def setting(
    name: str,
    parse: Parser,
    default: Any,
    doc: str,
    *,
    unit: str | None = None,
    secret: bool = False,
    empty: bool = False,
    default_text: str | None = None,
) -> Any:
    """A dataclass field that is read from the environment variable `name`."""
    spec = Setting(name, parse, doc, unit, secret, empty, default_text)
    return field(default=default, metadata={_SPEC: spec})


def environment() -> Env:
    """Where settings come from: the process environment, read nowhere else."""
    return os.environ


def specs(group: type) -> Iterator[tuple[dataclasses.Field[Any], Setting]]:
    """The declared settings of a group, with their fields."""
    for f in dataclasses.fields(group):
        spec = f.metadata.get(_SPEC)
        if spec is not None:
            yield f, spec


def spec_of(group: type, field_name: str) -> Setting:
    for f, spec in specs(group):
        if f.name == field_name:
            return spec
    raise KeyError(f"{group.__name__} declares no setting {field_name!r}")


def read(spec: Setting, env: Env, default: Any, parse: Parser | None = None) -> Any:
    """The value of one setting: parsed, or `default` when unset (or blank, unless an empty
    value means something). A bad value is a ConfigError naming the variable and saying
    what it got and what it expects."""
    raw = env.get(spec.name)
    if raw is None or (raw.strip() == "" and not (spec.empty and raw == "")):
        return default
    try:
        return (parse or spec.parse)(raw.strip())
    except ValueError as exc:
        got = "" if spec.secret else f" (got {raw!r})"
        raise ConfigError(spec.name, f"{_expectation(exc)}{got}") from exc


def _expectation(exc: ValueError) -> str:
    # int("abc") says "invalid literal for int() with base 10": say what is wanted instead.
    text = str(exc)
    if text.startswith("invalid literal for int()"):
        return "must be a whole number"
    if text.startswith("could not convert string to float"):
        return "must be a number"
    return text


def load(group: type[S], env: Env | None = None, parsers: Mapping[str, Parser] | None = None) -> S:
    """Every setting of `group` from `env` (the environment by default), then the group's
    cross-field `check()`, if it has one. `parsers` replaces a field's parser for this read."""
    env = environment() if env is None else env
    values = {
        f.name: read(spec, env, f.default, (parsers or {}).get(f.name)) for f, spec in specs(group)
    }
    loaded = group(**values)
    check = getattr(loaded, "check", None)
    if check is not None:
        check()
    return loaded


def value_of(group: type, field_name: str, env: Env | None = None) -> Any:
    """One setting of a group, without reading (or checking) the others."""
    env = environment() if env is None else env
    default = next(f.default for f, _ in specs(group) if f.name == field_name)
    return read(spec_of(group, field_name), env, default)


def is_set(group: type, field_name: str, env: Env | None = None) -> bool:
    """Whether the operator gave this setting a value (as opposed to its default)."""
    env = environment() if env is None else env
    return bool(env.get(spec_of(group, field_name).name, "").strip())


def describe_settings(groups: tuple[type, ...]) -> str:
    """The settings of `groups` as `--help` shows them: name, default and meaning."""
    lines = []
    for group in groups:
        for f, spec in specs(group):
            default = spec.default_text or _shown(f.default, spec)
            unit = f" {spec.unit}" if spec.unit and spec.default_text is None else ""
            doc = textwrap.fill(
                spec.doc, width=92, initial_indent="      ", subsequent_indent="      "
            )
            lines.append(f"  {spec.name} (default {default}{unit})\n{doc}")
    return "\n".join(lines)


def _shown(default: Any, spec: Setting) -> str:
    if default is None or default == ():
        return "unset"
    if spec.secret:
        return "unset"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    if default == "":
        return '""'
    return str(default)
