"""The README's examples of the library call ("From your application"), run as they are
written, each on its driver against a real database: the app's own row and the verification
both committed."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest
import sqlalchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from notifier.storage import outbox
from notifier.tokens import TokenKeys
from tests.support.app_drivers import _add_django_database
from tests.support.deliveries import policy_for_tests

pytestmark = pytest.mark.anyio

README = Path(__file__).parents[2] / "README.md"
SECTION = "## From your application"


def examples() -> dict[str, str]:
    """Each ```python block of the section, by the bold label of the paragraph above it."""
    section = README.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    found: dict[str, str] = {}
    label = ""
    block: list[str] | None = None
    for line in section.splitlines():
        if block is not None:
            if line == "```":
                found[label] = "\n".join(block)
                block = None
            else:
                block.append(line)
        elif line.startswith("**"):
            label = line.split("**")[1]
        elif line == "```python":
            block = []
    return found


@pytest.fixture(autouse=True)
def settings_from_environment(monkeypatch: pytest.MonkeyPatch, keys: TokenKeys) -> None:
    # The examples pass no policy: it comes from the NOTIFIER_* settings, read once.
    monkeypatch.setattr(outbox, "_cached_policy", policy_for_tests(keys))


async def committed(db: asyncpg.Connection) -> tuple[list[str], list[str]]:
    users = await db.fetch("SELECT id::text FROM users")
    verifications = await db.fetch("SELECT user_id FROM notifier.verifications")
    return [r[0] for r in users], [r[0] for r in verifications]


def test_the_readme_has_an_example_for_every_driver() -> None:
    assert set(examples()) == {"asyncpg", "psycopg 3", "SQLAlchemy", "Django"}


async def test_the_asyncpg_example_commits_the_signup_and_its_verification(
    db: asyncpg.Connection,
) -> None:
    await db.execute("CREATE TABLE users (id text PRIMARY KEY, email text)")
    namespace: dict[str, Any] = {}
    body = textwrap.indent(examples()["asyncpg"], "    ")
    exec(f"async def example(conn):\n{body}\n    return result", namespace)
    result = await namespace["example"](db)
    assert result.status == "pending"
    assert await committed(db) == (["ada"], ["ada"])


async def test_the_psycopg_example_commits_the_signup_and_its_verification(
    db: asyncpg.Connection, database_url: str
) -> None:
    await db.execute("CREATE TABLE users (id text PRIMARY KEY, email text)")
    namespace = {"url": database_url}
    await anyio.to_thread.run_sync(exec, examples()["psycopg 3"], namespace)
    assert await committed(db) == (["ada"], ["ada"])


class _Base(DeclarativeBase):
    pass


class _User(_Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(primary_key=True)
    email: Mapped[str]


@pytest.fixture
def engine(database_url: str) -> Iterator[sqlalchemy.Engine]:
    engine = sqlalchemy.create_engine(
        database_url.replace("postgresql://", "postgresql+psycopg://")
    )
    yield engine
    engine.dispose()


async def test_the_sqlalchemy_example_commits_the_signup_and_its_verification(
    db: asyncpg.Connection, engine: sqlalchemy.Engine
) -> None:
    await db.execute("CREATE TABLE users (id text PRIMARY KEY, email text)")
    namespace = {"engine": engine, "User": _User}
    await anyio.to_thread.run_sync(exec, examples()["SQLAlchemy"], namespace)
    assert await committed(db) == (["ada"], ["ada"])


def _run_django_example(url: str) -> None:
    from django.db import connections, models

    alias = f"readme_{uuid.uuid4().hex[:8]}"
    _add_django_database(alias, url)

    class User(models.Model):  # type: ignore[misc]  # Django ships no types
        email = models.TextField()

        class Meta:
            app_label = alias
            db_table = "users"

    # The example as an app writes it, on this test's database alias instead of "default".
    code = examples()["Django"].replace('"default"', repr(alias))
    code = code.replace("transaction.atomic()", f"transaction.atomic(using={alias!r})")
    code = code.replace("User.objects.create", f"User.objects.using({alias!r}).create")
    try:
        exec(code, {"User": User})
    finally:
        connections[alias].close()
        del connections.settings[alias]


async def test_the_django_example_commits_the_signup_and_its_verification(
    db: asyncpg.Connection, database_url: str
) -> None:
    await db.execute("CREATE TABLE users (id serial PRIMARY KEY, email text)")
    await anyio.to_thread.run_sync(_run_django_example, database_url)
    users, verifications = await committed(db)
    assert len(users) == 1 and verifications == users
