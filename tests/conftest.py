"""Fixtures for every tier: a real PostgreSQL server and a database per test."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import asyncpg
import pytest

from notifier.storage.database import connect, create_pool
from notifier.storage.embedded import EmbeddedPostgres
from notifier.tokens import TokenKeys
from tests.support import harness
from tests.support.databases import (
    create_database,
    create_template,
    drop_database,
    with_database,
)

pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.topologies",
    "tests.support.browser",
    "tests.support.console_stack",
    "tests.soak.options",
]

# Durability buys nothing in a throwaway test cluster and costs seconds per run.
TEST_SERVER_SETTINGS = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}


def pytest_configure(config: pytest.Config) -> None:
    """A temporary directory of this run's own, unless one was given with --basetemp.

    pytest's default numbered directories are pruned by every new session: a second run
    started on the same machine deletes a running one's embedded PostgreSQL from under it.
    """
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="notifier-tests-")
        config.stash[_OWN_BASETEMP] = Path(config.option.basetemp)


def pytest_unconfigure(config: pytest.Config) -> None:
    # Kept after a failure, to read the servers' logs; gone after a clean run.
    own = config.stash.get(_OWN_BASETEMP, None)
    if own is not None and config.stash.get(_PASSED, False):
        shutil.rmtree(own, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_PASSED] = exitstatus == 0


_OWN_BASETEMP = pytest.StashKey[Path]()
_PASSED = pytest.StashKey[bool]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test carries the marker of its tier, from the directory it lives in."""
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in ("unit", "integration", "acceptance"):
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    # asyncpg and aiosmtplib are asyncio-only.
    return "asyncio"


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """NOTIFIER_TEST_DATABASE_URL's server, or an embedded one for this run."""
    url = harness.value(harness.TEST_DATABASE_URL)
    if url:
        yield url
        return
    with EmbeddedPostgres(tmp_path_factory.mktemp("pg"), TEST_SERVER_SETTINGS) as embedded:
        yield embedded


@pytest.fixture(scope="session")
def template_name(server_url: str) -> Iterator[str]:
    name = anyio.run(create_template, server_url, backend="asyncio")
    yield name
    anyio.run(drop_database, server_url, name, backend="asyncio")


@pytest.fixture
async def database_url(server_url: str, template_name: str) -> AsyncIterator[str]:
    """A fresh, migrated database of this test's own, dropped after it."""
    name = await create_database(server_url, template_name)
    try:
        yield with_database(server_url, name)
    finally:
        await drop_database(server_url, name)


@pytest.fixture
async def empty_database_url(server_url: str) -> AsyncIterator[str]:
    """A fresh database with no notifier schema at all."""
    name = await create_database(server_url)
    try:
        yield with_database(server_url, name)
    finally:
        await drop_database(server_url, name)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await connect(database_url)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_url)
    try:
        yield pool
    finally:
        await pool.close()


# Generated once (secrets.token_urlsafe(32)): only generator-like secrets are accepted.
TEST_SECRET = "pYq3Zc8vT1mWbK7rXs2LdN9fHg4JaE6uQo0VtRi5Bk"


@pytest.fixture
def keys() -> TokenKeys:
    return TokenKeys((TEST_SECRET,))
