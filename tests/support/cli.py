"""Run the real `notifier` command as a subprocess."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

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


class RunningCli:
    """A long-running `notifier` subprocess whose stderr is collected line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._changed = anyio.Event()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    async def collect(self) -> None:
        assert self.process.stderr is not None
        buffer = b""
        async for chunk in self.process.stderr:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            self.lines += [line.decode(errors="replace") for line in complete]
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_for_line(self, fragment: str) -> str:
        """The first stderr line containing `fragment`; callers bound the wait."""
        while True:
            for line in self.lines:
                if fragment in line:
                    return line
            if self.process.returncode is not None:
                raise AssertionError(f"exited {self.process.returncode} first:\n{self.output}")
            await self._changed.wait()


@contextlib.asynccontextmanager
async def running_cli(
    *args: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[RunningCli]:
    """Start `notifier ARGS`; on exit, kill it if it is still running."""
    process = await anyio.open_process(
        [*NOTIFIER, *args], env=cli_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    cli = RunningCli(process)
    async with process, anyio.create_task_group() as tg:
        tg.start_soon(cli.collect)
        try:
            yield cli
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await process.wait()
