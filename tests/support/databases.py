"""Test databases: one migrated template per run, one fresh copy per test, dropped after."""

from __future__ import annotations

import secrets
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

from notifier.storage import migrations
from notifier.storage.database import connect


def with_database(url: str, name: str, user: str | None = None) -> str:
    """The same server URL, naming another database and, if given, another user."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = f"{quote(user)}@{netloc.rpartition('@')[2]}"
    return urlunsplit(parts._replace(netloc=netloc, path="/" + name))


def unique_name(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(6)}"


async def create_template(server_url: str) -> str:
    """A database migrated to the current schema, to copy for each test."""
    name = unique_name("notifier_tpl")
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    conn = await connect(with_database(server_url, name))
    try:
        await migrations.migrate(conn)
    finally:
        await conn.close()
    return name


async def create_database(server_url: str, template: str | None = None) -> str:
    name = unique_name("notifier_test")
    admin = await asyncpg.connect(server_url)
    try:
        clause = f' TEMPLATE "{template}"' if template else ""
        await admin.execute(f'CREATE DATABASE "{name}"{clause}')
    finally:
        await admin.close()
    return name


async def drop_database(server_url: str, name: str) -> None:
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
