"""Run the real `notifier` command as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio

NOTIFIER = [sys.executable, "-m", "notifier"]
# A CLI call that takes longer than this has hung.
CLI_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without any NOTIFIER_* setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTIFIER_", "OTEL_"))}
    env.update(extra or {})
    return env


async def run_cli(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Result:
    with anyio.fail_after(CLI_TIMEOUT_SECONDS):
        done = await anyio.run_process(
            [*NOTIFIER, *args],
            env=cli_env(env),
            cwd=cwd,
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())
