"""Schema migrations: ordered, forward-only SQL files applied once each, under an advisory lock."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from notifier.errors import ChangedMigrationError, MigrationError
from notifier.storage.connection import Connection
from notifier.storage.queries import sql

log = logging.getLogger(__name__)

# Advisory lock key shared by every process that migrates ("notifier" folded into 63 bits).
MIGRATION_LOCK_KEY = (
    int.from_bytes(hashlib.sha256(b"notifier.storage.migrations").digest()[:8]) >> 1
)
_FILENAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file: its version, name, SQL text and the checksum of that text."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    """What the database has applied, and what it still needs."""

    applied: list[int]
    pending: list[Migration]
    unknown: list[int]


def schema_dir() -> Traversable:
    """The migrations shipped with the package (wheel), or the checkout's schema/ (editable)."""
    packaged = resources.files("notifier").joinpath("schema")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "schema"


def discover(directory: Traversable | None = None) -> list[Migration]:
    """Every migration file in version order; malformed names and duplicate versions are errors."""
    directory = schema_dir() if directory is None else directory
    found: dict[int, Migration] = {}
    for entry in directory.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILENAME.match(entry.name)
        if match is None:
            raise MigrationError(f"migration file {entry.name!r} is not named NNNN_description.sql")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(f"two migration files share version {version:04d}")
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


async def status(conn: Connection, migrations: list[Migration]) -> MigrationStatus:
    """Compare disk and database; a changed applied migration raises ChangedMigrationError."""
    recorded: dict[int, Any] = {}
    if await conn.fetchval(sql("migration_ledger_exists")):
        recorded = {row["version"]: row for row in await conn.fetch(sql("migrations_applied"))}
    known = {m.version for m in migrations}
    for migration in migrations:
        row = recorded.get(migration.version)
        if row is not None and row["checksum"] != migration.checksum:
            raise ChangedMigrationError(
                migration.version, migration.name, row["checksum"], migration.checksum
            )
    return MigrationStatus(
        applied=sorted(recorded),
        pending=[m for m in migrations if m.version not in recorded],
        unknown=sorted(v for v in recorded if v not in known),
    )


async def migrate(conn: Connection, migrations: list[Migration] | None = None) -> list[Migration]:
    """Apply what is pending, each migration in its own transaction; return what was applied.

    The advisory lock makes concurrent runs safe: the second waits, then finds nothing to do.
    """
    migrations = discover() if migrations is None else migrations
    await conn.execute(sql("migration_lock"), MIGRATION_LOCK_KEY)
    try:
        current = await status(conn, migrations)
        if current.unknown:
            log.warning(
                "the database has migrations this release does not know: %s",
                ", ".join(f"{v:04d}" for v in current.unknown),
            )
        for migration in current.pending:
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    sql("migration_record"), migration.version, migration.name, migration.checksum
                )
            log.info("applied migration %04d_%s", migration.version, migration.name)
        return current.pending
    finally:
        await conn.execute(sql("migration_unlock"), MIGRATION_LOCK_KEY)
