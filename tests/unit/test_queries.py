"""The query catalogues parse (the product's and the soak's, read by one loader), and every
name their code asks for exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import notifier
from notifier.storage.queries import PRODUCT, Catalogue, catalogue, sql
from tests.soak.probe import QUERIES as SOAK

CATALOGUES = {"notifier": PRODUCT, "soak": SOAK}


def test_unknown_query_name_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="no statement named 'nope'"):
        sql("nope")


@pytest.mark.parametrize("queries", CATALOGUES.values(), ids=list(CATALOGUES))
def test_every_entry_has_a_parameter_description_and_a_statement(queries: Catalogue) -> None:
    for name, body in queries.entries.items():
        lines = body.splitlines()
        assert lines[0].startswith("-- "), f"{name} lacks its description line"
        assert any(not line.startswith("--") for line in lines), f"{name} has no statement"


def test_every_query_the_package_names_is_in_the_catalogue() -> None:
    package = Path(notifier.__file__).parent
    named = set()
    for source in package.rglob("*.py"):
        named |= set(re.findall(r'\bsql\("([a-z_0-9]+)"\)', source.read_text()))
    assert named, "no sql(...) calls found"
    assert named <= set(catalogue()), named - set(catalogue())


def test_every_query_the_soak_names_is_in_its_catalogue() -> None:
    named = set()
    for source in Path(__file__).parents[1].joinpath("soak").glob("*.py"):
        named |= set(re.findall(r'\b(?:sql|fetch|fetchrow)\("([a-z_0-9]+)"', source.read_text()))
    assert named, "no statements named in tests/soak"
    assert named <= set(SOAK.entries), named - set(SOAK.entries)


def test_catalogue_holds_no_ddl() -> None:
    for name, body in catalogue().items():
        statement = re.sub(r"--[^\n]*", "", body).upper()
        assert not re.search(r"\b(CREATE|ALTER|DROP)\s+(TABLE|INDEX|SCHEMA|TRIGGER)", statement), (
            name
        )
