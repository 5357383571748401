"""Django's database connection: a cursor in its `%s` paramstyle, inside `atomic()`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from notifier.storage.drivers import format_style


class DjangoRunner:
    """`django.db.connections[alias]`, as a SyncRunner."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self._connection = connection

    def in_transaction(self) -> bool:
        return bool(self._connection.in_atomic_block or not self._connection.get_autocommit())

    def fetch_one(self, statement: str, values: Sequence[object]) -> Mapping[str, Any]:
        with self._connection.cursor() as cursor:
            cursor.execute(format_style(statement), list(values))
            names = [column[0] for column in cursor.description]
            row = cursor.fetchone()
        if row is None:
            raise LookupError("the statement returned no row")
        return dict(zip(names, row, strict=True))
