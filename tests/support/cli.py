"""Run the real `notifier` command as a subprocess."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.abc
import orjson

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


def log_records(*outputs: str) -> list[dict[str, Any]]:
    """The JSON log lines in a command's outputs, parsed (its own JSON, indented, has no line
    that is a whole object with a level and a logger)."""
    records = []
    for line in "\n".join(outputs).splitlines():
        try:
            parsed = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(parsed, dict) and {"level", "logger"} <= parsed.keys():
            records.append(parsed)
    return records


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
    """A long-running `notifier` subprocess whose stderr (and, if asked, stdout) is collected
    line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.lines: list[str] = []  # stderr
        self.stdout_lines: list[str] = []  # stays empty unless stdout is captured
        self._changed = anyio.Event()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    async def collect(self, stream: anyio.abc.ByteReceiveStream, into: list[str]) -> None:
        buffer = b""
        async for chunk in stream:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            into += [line.decode(errors="replace") for line in complete]
            self._notify()

    async def watch_exit(self) -> None:
        # Wakes a waiter when the process exits, so it fails at once, not at its deadline.
        await self.process.wait()
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for_line(
        self, fragment: str, stream: Literal["stderr", "stdout"] = "stderr"
    ) -> str:
        """The first line on `stream` containing `fragment`; callers bound the wait."""
        lines = self.lines if stream == "stderr" else self.stdout_lines
        while True:
            for line in lines:
                if fragment in line:
                    return line
            if self.process.returncode is not None:
                code = self.process.returncode
                stdout = "\n".join(self.stdout_lines)
                raise AssertionError(
                    f"exited {code} first:\n{self.output}"
                    + (f"\nstdout:\n{stdout}" if stdout else "")
                )
            await self._changed.wait()


@contextlib.asynccontextmanager
async def running_cli(
    *args: str, env: Mapping[str, str] | None = None, capture_stdout: bool = False
) -> AsyncIterator[RunningCli]:
    """Start `notifier ARGS`; on exit, kill it if it is still running.

    stderr is always collected; stdout too with `capture_stdout` (else it is discarded).
    """
    process = await anyio.open_process(
        [*NOTIFIER, *args],
        env=cli_env(env),
        stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    cli = RunningCli(process)
    async with process, anyio.create_task_group() as tg:
        assert process.stderr is not None
        tg.start_soon(cli.collect, process.stderr, cli.lines)
        if process.stdout is not None:
            tg.start_soon(cli.collect, process.stdout, cli.stdout_lines)
        tg.start_soon(cli.watch_exit)
        try:
            yield cli
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await process.wait()
