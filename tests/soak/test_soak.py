"""The soak: the real API and workers delivering under crashes, stalls, a database restart
or failover and a misbehaving mail server, checked from outside against DESIGN.md's
invariants. Marked slow, so `pytest` leaves it out: `pytest -m slow tests/soak` runs it
(README.md beside this file has its options)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from tests.soak.processes import ProcessFailed
from tests.soak.report import verdict
from tests.soak.runner import run_soak
from tests.soak.settings import SoakSettings
from tests.support.topologies import unavailable
from tests.support.topology import TopologyUnavailable

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

# Wide enough for the summary and the invariants table.
CONSOLE_WIDTH = 120


async def test_every_invariant_holds_while_processes_the_database_and_the_mail_server_fail(
    soak_settings: SoakSettings, soak_run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Progress and the summary go straight to the terminal: the run takes minutes.
    with capsys.disabled():
        try:
            findings = await run_soak(soak_settings, Console(width=CONSOLE_WIDTH), soak_run_dir)
        except TopologyUnavailable as exc:
            unavailable(exc)
        except ProcessFailed as exc:
            pytest.fail(f"soak: could not run the product: {exc}", pytrace=False)
    if not findings.ok:
        pytest.fail(verdict(findings, soak_run_dir / "summary.json"), pytrace=False)
