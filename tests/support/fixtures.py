"""Shared fixtures that need more than a database (registered from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.smtp_server import SmtpServer


@pytest.fixture
def smtp_server(free_tcp_port_factory: Callable[[], int]) -> Iterator[SmtpServer]:
    """A real SMTP server of this test's own, accepting everything until told otherwise."""
    with SmtpServer(free_tcp_port_factory()) as server:
        yield server
