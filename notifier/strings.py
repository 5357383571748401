"""The words of the pages an emailed link opens, and of a verification's purpose, per
language: `templates/<locale>/pages.toml`, beside the email's templates and overridden from
the same directory (NOTIFIER_TEMPLATE_DIR), in the same order.

One table per page (`[confirm]`, `[verified]`, ...) of `key = "text"`, where a text may say
$product_name, $email (the address, redacted) and $purpose (the purpose's word, from
`[purposes]`); and `[purposes]`, the word for each purpose a request may name ("signup" =
"sign-up"), a purpose without one being shown as it was asked for.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

from notifier.config import MessageSettings
from notifier.errors import ConfigError
from notifier.locales import DEFAULT_LOCALE, closest, normalize_locale
from notifier.settings_spec import spec_of

PAGES_FILE = "pages.toml"
# The variable errors about overrides name: the email's and the pages' alike.
TEMPLATE_DIR_VARIABLE = spec_of(MessageSettings, "template_dir").name
PURPOSES = "purposes"
# What a page's text may name.
PLACEHOLDERS = frozenset({"product_name", "email", "purpose"})

_Source = Path | Traversable


@dataclass(frozen=True, slots=True)
class Strings:
    """One language's words: `texts` by "page.key", `purposes` by purpose."""

    locale: str
    texts: Mapping[str, str]
    purposes: Mapping[str, str]

    def purpose(self, name: str) -> str:
        """The word for a purpose in this language, or the purpose as asked for."""
        return self.purposes.get(name, name)

    def text(self, key: str, **values: str) -> str:
        """The text at `key`, its placeholders filled with `values` (unnamed ones left)."""
        return Template(self.texts[key]).safe_substitute(values)


@dataclass(frozen=True, slots=True)
class PageStrings:
    """Every language's words, read and checked once at start."""

    languages: Mapping[str, Strings]

    @classmethod
    def load(cls, directory: Path | None) -> PageStrings:
        """The shipped words, with any of them overridden by `directory`'s pages.toml files.

        For a language L, each text comes from the first of: `directory/L/pages.toml`, the
        shipped `L/`, `directory/pages.toml` (which stands for English), the shipped `en/`.
        A file that cannot be read or parsed, a key the shipped English file lacks (a typo
        would otherwise pass unseen), a text that is not a string, or a placeholder other
        than PLACEHOLDERS, is a ConfigError naming NOTIFIER_TEMPLATE_DIR.
        """
        shipped = {locale: _read(source) for locale, source in _shipped().items()}
        overrides = {
            locale: _read(source)
            for locale, source in (_overrides(directory) if directory else {}).items()
        }
        english = shipped[DEFAULT_LOCALE]
        for where, words in overrides.items():
            unknown = sorted(words.keys() - english.keys())
            if unknown:
                raise ConfigError(
                    TEMPLATE_DIR_VARIABLE,
                    f"{where}/{PAGES_FILE} names {', '.join(unknown)}, which no page has "
                    f"(the shipped en/{PAGES_FILE} lists every key)",
                )
        languages = {}
        for locale in sorted(shipped.keys() | overrides.keys()):
            chain = [overrides.get(locale, {}), shipped.get(locale, {})]
            if locale != DEFAULT_LOCALE:
                chain += [overrides.get(DEFAULT_LOCALE, {}), english]
            merged = {key: next(c[key] for c in chain if key in c) for key in english}
            languages[locale] = Strings(
                locale,
                {k: v for k, v in merged.items() if not k.startswith(f"{PURPOSES}.")},
                {
                    k.removeprefix(f"{PURPOSES}."): v
                    for k, v in merged.items()
                    if k.startswith(f"{PURPOSES}.")
                },
            )
        return cls(languages)

    def for_locale(self, locale: str | None) -> Strings:
        """The closest language there is for `locale` (de-AT: de-AT, then de, then en)."""
        return self.languages[closest(locale, self.languages)]


def _shipped() -> dict[str, _Source]:
    root = resources.files("notifier").joinpath("templates")
    return {
        entry.name: entry.joinpath(PAGES_FILE)
        for entry in root.iterdir()
        if entry.is_dir() and entry.joinpath(PAGES_FILE).is_file()
    }


def _overrides(directory: Path) -> dict[str, _Source | _Both]:
    """The override files by locale; a pages.toml at the top of `directory` is English's."""
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise ConfigError(
            TEMPLATE_DIR_VARIABLE, f"cannot read the directory {directory}: {exc}"
        ) from exc
    found: dict[str, _Source | _Both] = {}
    for entry in entries:
        if entry.is_dir() and not entry.name.startswith(".") and (entry / PAGES_FILE).is_file():
            try:
                found[normalize_locale(entry.name)] = entry / PAGES_FILE
            except ValueError as exc:
                raise ConfigError(
                    TEMPLATE_DIR_VARIABLE, f"{entry} is not named for a locale: {exc}"
                ) from exc
    top = directory / PAGES_FILE
    if top.is_file():
        english = found.get(DEFAULT_LOCALE)
        # en/ is explicit; the top's file fills in what en/ leaves out.
        found[DEFAULT_LOCALE] = top if english is None else _Both(top, english)
    return found


@dataclass(frozen=True, slots=True)
class _Both:
    """English's two override files: `over` (en/) wins over `under` (the top)."""

    under: Path
    over: _Source | _Both


def _read(source: _Source | _Both) -> dict[str, str]:
    """A pages.toml as "table.key" -> text, checked."""
    if isinstance(source, _Both):
        return {**_read(source.under), **_read(source.over)}
    try:
        parsed = tomllib.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(TEMPLATE_DIR_VARIABLE, f"cannot read {source}: {exc}") from exc
    flat: dict[str, str] = {}
    for table, keys in parsed.items():
        if not isinstance(keys, dict):
            raise ConfigError(
                TEMPLATE_DIR_VARIABLE, f"{source}: {table} must be a table ([{table}])"
            )
        for key, text in keys.items():
            where = f"{table}.{key}"
            if not isinstance(text, str):
                raise ConfigError(TEMPLATE_DIR_VARIABLE, f"{source}: {where} must be a string")
            _check(text, f"{source}: {where}")
            flat[where] = text
    return flat


def _check(text: str, where: str) -> None:
    template = Template(text)
    if not template.is_valid():
        raise ConfigError(TEMPLATE_DIR_VARIABLE, f"{where} has a stray $ (write $$ for one)")
    named = set(template.get_identifiers()) - PLACEHOLDERS
    if named:
        raise ConfigError(
            TEMPLATE_DIR_VARIABLE,
            f"{where} names ${', $'.join(sorted(named))}; a page may name only "
            f"${', $'.join(sorted(PLACEHOLDERS))}",
        )
