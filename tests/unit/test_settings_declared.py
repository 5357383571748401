"""Every setting is declared once, documented, and the only one of its name anywhere."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from notifier.cli import _READS, build_parser
from notifier.config import GROUPS
from notifier.settings_spec import specs
from tests.support import harness

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "operations.md")
# Where a setting may be named: the docs, the deployment files, the tests, the benchmarks, CI.
MENTIONS = ("README.md", "docs", "deploy", "tests", "benchmarks", ".ci")
_NAME = re.compile(r"\bNOTIFIER_[A-Z0-9_]*[A-Z0-9]\b")

DECLARED = {spec.name: spec for group in GROUPS for _, spec in specs(group)}


def test_no_setting_is_declared_twice() -> None:
    names = [spec.name for group in GROUPS for _, spec in specs(group)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_every_setting_is_documented(name: str) -> None:
    assert any(name in doc.read_text() for doc in DOCUMENTS), f"{name} is in neither doc"


def _mentioned() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for root in MENTIONS:
        paths = [ROOT / root] if (ROOT / root).is_file() else (ROOT / root).rglob("*")
        for path in paths:
            if path.is_file() and path.suffix in {".md", ".py", ".yaml", ".yml", ".sh", ""}:
                for name in _NAME.findall(path.read_text(errors="replace")):
                    found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_name_in_docs_deploy_and_tests_is_one_the_code_declares() -> None:
    unknown = {
        name: sorted(where)
        for name, where in _mentioned().items()
        if name not in DECLARED and name not in harness.VARIABLES
    }
    assert unknown == {}


@pytest.mark.parametrize("command", sorted(_READS))
def test_every_commands_help_names_what_it_does_and_each_setting_it_reads(command: str) -> None:
    parser = build_parser()
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    help_of = subparsers.choices[command]
    text = help_of.format_help()
    assert help_of.description and len(text.splitlines()) > 5
    for group in _READS[command]:
        for _, spec in specs(group):
            assert f"{spec.name} (default " in text, (command, spec.name)


def test_only_the_settings_machinery_reads_the_environment() -> None:
    readers = {
        path.name
        for path in (ROOT / "notifier").glob("*.py")
        if re.search(r"os\.environ|os\.getenv|getenv\(", path.read_text())
    }
    assert readers == {"settings_spec.py"}
