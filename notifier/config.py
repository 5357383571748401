"""Settings: every NOTIFIER_* environment variable, parsed and validated once at start."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from notifier.errors import ConfigError

T = TypeVar("T")

DEFAULT_DATA_DIR = Path(".notifier")


def _read(env: Mapping[str, str], name: str, parse: Callable[[str], T], default: T) -> T:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse(raw.strip())
    except ValueError as exc:
        raise ConfigError(name, f"{exc} (got {raw!r})") from exc


def _optional_str(raw: str) -> str | None:
    return raw


def _database_url(raw: str) -> str | None:
    if not raw.startswith(("postgres://", "postgresql://")):
        raise ValueError("must be a postgresql:// URL")
    return raw


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    """Where the database is: a server URL, or an embedded server in a data directory."""

    # NOTIFIER_DATABASE_URL: a postgresql:// URL. Unset: notifier runs an embedded
    # PostgreSQL in data_dir, starting it on demand and stopping it at exit.
    url: str | None = None
    # NOTIFIER_DATA_DIR: the directory the embedded server owns (created on first use).
    data_dir: Path = DEFAULT_DATA_DIR

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DatabaseSettings:
        env = os.environ if env is None else env
        return cls(
            url=_read(env, "NOTIFIER_DATABASE_URL", _database_url, None),
            data_dir=_read(env, "NOTIFIER_DATA_DIR", Path, DEFAULT_DATA_DIR),
        )
