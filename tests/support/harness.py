"""The environment variables the test suite itself reads (not notifier: its own settings are
declared in notifier.config). Named NOTIFIER_TEST_* / NOTIFIER_SCREENSHOTS so that a
developer's shell keeps them next to the product's."""

from __future__ import annotations

import os

# A PostgreSQL server to run the tests on instead of an embedded one (a superuser URL).
TEST_DATABASE_URL = "NOTIFIER_TEST_DATABASE_URL"
# Set (as CI does): the topology tests fail instead of skipping when PostgreSQL's or
# PgBouncer's binaries are missing.
REQUIRE_TOPOLOGIES = "NOTIFIER_TEST_REQUIRE_TOPOLOGIES"
# Where the screenshot tests write their PNGs (default: a temporary folder they print).
SCREENSHOTS = "NOTIFIER_SCREENSHOTS"

VARIABLES = frozenset({TEST_DATABASE_URL, REQUIRE_TOPOLOGIES, SCREENSHOTS})


def value(name: str) -> str | None:
    """One of VARIABLES from the environment (None: unset or blank)."""
    assert name in VARIABLES, name
    return os.environ.get(name, "").strip() or None
