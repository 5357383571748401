"""How a database URL is shown in errors and logs: where it points, never its credentials."""

from __future__ import annotations

import pytest

from notifier.storage.database import describe


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:secret@db.internal:5432/notifier", "db.internal:5432/notifier"),
        ("postgresql://db.internal/notifier", "db.internal/notifier"),
        (
            "postgresql://app:secret@db-a:5432,db-b:5433/notifier?target_session_attrs=read-write",
            "db-a:5432,db-b:5433/notifier",
        ),
        ("postgresql://postgres@/postgres?host=/run/pg&port=5432", "/run/pg:5432/postgres"),
    ],
)
def test_describe_names_every_host_and_no_credentials(url: str, shown: str) -> None:
    assert describe(url) == shown
    assert "secret" not in describe(url)
