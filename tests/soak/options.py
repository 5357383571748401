"""The soak's command-line options, and the settings they make.

A pytest plugin registered from tests/conftest.py, so the options are known to every
`pytest` run, wherever it is started and whichever paths it is given.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.soak.settings import SoakSettings
from tests.soak.topology import TOPOLOGIES

# Seconds the run may take beyond its load-and-fault cap and its drain timeout (setting up
# the servers and processes, stopping them, reading and checking everything), after which
# pytest-timeout stops it: a backstop, since every phase has its own bound.
OUTSIDE_PHASES_SECONDS = 300.0
HERE = Path(__file__).resolve().parent

_SIZES = {
    # option name: (SoakSettings field, type, help)
    "count": ("count", int, "verifications to request (default 5000; quick: 300)"),
    "workers": ("workers", int, "worker processes (default 3)"),
    "seed": ("seed", int, "seed for every random choice (default 1)"),
    "rate": ("rate", float, "requests per second (default 40; quick: 10)"),
    "duration": (
        "duration",
        float,
        "cap on the load-and-fault phase, seconds; requests not accepted by then are "
        "violations (default 900; quick: 90)",
    ),
    "drain-timeout": (
        "drain_timeout",
        float,
        "seconds after faults stop within which every row must be terminal "
        "(default 120; quick: 45)",
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("soak", "the soak (tests/soak, marked slow: run with -m slow)")
    group.addoption(
        "--soak-quick",
        action="store_true",
        help="CI's size: 300 verifications at 10 a second, about a minute",
    )
    for name, (_, kind, text) in _SIZES.items():
        group.addoption(f"--soak-{name}", type=kind, help=text)
    group.addoption(
        "--soak-topology",
        choices=TOPOLOGIES,
        help="single: the embedded server, restarted once (default); failover: a primary and "
        "a streaming replica, failed over once instead; pgbouncer: pools through PgBouncer in "
        "transaction mode, LISTEN through it in session mode, the server restarted behind it",
    )
    group.addoption(
        "--soak-run-dir",
        type=Path,
        help="keep the run's database, logs and summary.json here (default: pytest's "
        "temporary directory, kept after a failure)",
    )


def settings_from(config: pytest.Config) -> SoakSettings:
    """The run the options ask for."""
    settings = SoakSettings.quick() if config.getoption("soak_quick") else SoakSettings()
    overrides = {
        field: config.getoption(f"soak_{name.replace('-', '_')}")
        for name, (field, _, _) in _SIZES.items()
    }
    overrides["topology"] = config.getoption("soak_topology")
    settings = dataclasses.replace(
        settings, **{k: v for k, v in overrides.items() if v is not None}
    )
    if settings.count < 1 or settings.workers < 1 or settings.rate <= 0:
        raise pytest.UsageError("--soak-count, --soak-workers and --soak-rate must be positive")
    return settings


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The soak's time limit follows its size instead of the suite's default."""
    settings = settings_from(config)
    budget = settings.duration + settings.drain_timeout + OUTSIDE_PHASES_SECONDS
    for item in items:
        if item.path.parent == HERE:
            item.add_marker(pytest.mark.timeout(budget))


@pytest.fixture(scope="session")
def soak_settings(pytestconfig: pytest.Config) -> SoakSettings:
    """The soak's settings, from the command line."""
    return settings_from(pytestconfig)


@pytest.fixture
def soak_run_dir(pytestconfig: pytest.Config, tmp_path: Path) -> Path:
    """Where the run keeps its files: --soak-run-dir, or this test's temporary directory."""
    chosen: Path | None = pytestconfig.getoption("soak_run_dir")
    if chosen is None:
        return tmp_path
    chosen.mkdir(parents=True, exist_ok=True)
    return chosen.resolve()
