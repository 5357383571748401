"""`notifier --version`: which release is installed, asked before anything else is set up."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

from tests.support.cli import run_cli

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("flag", ["--version", "-V"])
async def test_version_prints_the_installed_distributions_version_and_exits_zero(
    flag: str,
) -> None:
    result = await run_cli(flag)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"notifier {version('notifier')}\n"


async def test_version_needs_no_database_and_no_subcommand(tmp_path: Path) -> None:
    # Run where an embedded server would be created: asking the version must not start one.
    result = await run_cli("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / ".notifier").exists()
    assert result.stderr == ""
