"""The loop a long-running command runs on."""

from __future__ import annotations

import asyncio

import pytest

from notifier import event_loop


def loop_module() -> str:
    seen: list[str] = []

    async def probe() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__)

    event_loop.run_service(probe)
    return seen[0]


def test_a_service_runs_on_uvloop_where_it_is_installed() -> None:
    assert event_loop.uvloop_available()
    assert loop_module().startswith("uvloop")


def test_a_service_runs_on_asyncios_loop_where_uvloop_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_loop, "uvloop_available", lambda: False)
    assert loop_module().startswith("asyncio")
