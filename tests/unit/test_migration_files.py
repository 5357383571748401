"""Migration files are discovered in version order and misnamed ones are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from notifier.errors import MigrationError
from notifier.storage import migrations


def test_shipped_migrations_are_numbered_from_one_without_gaps() -> None:
    versions = [m.version for m in migrations.discover()]
    assert versions == list(range(1, versions[-1] + 1))


def test_every_shipped_migration_opens_with_a_comment_saying_why() -> None:
    for migration in migrations.discover():
        assert migration.sql.startswith("-- "), migration.name


def test_discover_orders_by_version_not_by_name(tmp_path: Path) -> None:
    (tmp_path / "0002_b.sql").write_text("-- b\nSELECT 2;")
    (tmp_path / "0010_a.sql").write_text("-- a\nSELECT 10;")
    (tmp_path / "0001_z.sql").write_text("-- z\nSELECT 1;")
    assert [m.version for m in migrations.discover(tmp_path)] == [1, 2, 10]


def test_misnamed_migration_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "1_create.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"NNNN_description\.sql"):
        migrations.discover(tmp_path)


def test_duplicate_migration_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "0001_b.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match="share version 0001"):
        migrations.discover(tmp_path)


def test_checksum_changes_with_the_text() -> None:
    a = migrations.Migration(1, "a", "SELECT 1;")
    b = migrations.Migration(1, "a", "SELECT 1; ")
    assert a.checksum != b.checksum
