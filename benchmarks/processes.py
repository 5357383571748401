"""Processes the runner starts (workers, sinks, listeners, load loops): output, readiness, stop.

Each child's stdout and stderr go to one log file in the run directory; its stdout lines
are also kept, since the helper processes report their results there.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from tests.support.cli import cli_env

# Seconds a child may take to print its ready line.
READY_TIMEOUT_SECONDS = 60.0
# Seconds a child gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT_SECONDS = 30.0


class ChildFailed(RuntimeError):
    """A child exited, or never said it was ready."""


class Child:
    """One running child process, from `started()` until its block ends."""

    def __init__(self, name: str, process: anyio.abc.Process, log_path: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._changed = anyio.Event()
        self._log = log_path.open("a", encoding="utf-8")

    @property
    def pid(self) -> int:
        return self.process.pid

    async def pump(self, stream: anyio.abc.ByteReceiveStream, into: list[str], tag: str) -> None:
        buffer = b""
        async for chunk in stream:
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for raw in complete:
                line = raw.decode(errors="replace")
                into.append(line)
                self._log.write(f"{tag} {line}\n")
            self._log.flush()
            self._wake()

    async def watch_exit(self) -> None:
        await self.process.wait()
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for_line(self, fragment: str) -> str:
        """The first stdout or stderr line holding `fragment`; callers bound the wait."""
        while True:
            for line in (*self.stdout, *self.stderr):
                if fragment in line:
                    return line
            if self.process.returncode is not None:
                tail = "\n".join(self.stderr[-20:])
                raise ChildFailed(
                    f"{self.name} exited with {self.process.returncode} before printing "
                    f"{fragment!r}:\n{tail}"
                )
            await self._changed.wait()

    async def send_line(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(text.encode() + b"\n")

    async def stop(self, grace: float = STOP_TIMEOUT_SECONDS) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; the exit code."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(grace):
                await self.process.wait()
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        self._log.close()
        return self.process.returncode


@contextlib.asynccontextmanager
async def started(
    name: str,
    argv: Sequence[str],
    *,
    log_dir: Path,
    ready: str | None,
    env: Mapping[str, str] | None = None,
    stdin: bool = False,
    cwd: Path | None = None,
    ready_timeout: float = READY_TIMEOUT_SECONDS,
    stop_timeout: float = STOP_TIMEOUT_SECONDS,
) -> AsyncIterator[Child]:
    """Start `argv`, wait for a line holding `ready` (unless None), and stop it when the
    block ends. Its output goes to `log_dir` (which must exist)."""
    kwargs: dict[str, Any] = {"cwd": cwd} if cwd is not None else {}
    process = await anyio.open_process(
        list(argv),
        # Without NOTIFIER_* and OTEL_* settings of this process's: telemetry stays off in the
        # measured processes (no OTLP endpoint: notifier installs no SDK provider), so what
        # is measured is the delivery path alone.
        env=dict(env) if env is not None else cli_env(),
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )
    child = Child(name, process, log_dir / f"{name}.log")
    async with process, anyio.create_task_group() as tg:
        assert process.stdout is not None and process.stderr is not None
        tg.start_soon(child.pump, process.stdout, child.stdout, "out")
        tg.start_soon(child.pump, process.stderr, child.stderr, "err")
        tg.start_soon(child.watch_exit)
        try:
            if ready is not None:
                with anyio.fail_after(ready_timeout):
                    await child.wait_for_line(ready)
            yield child
        finally:
            with anyio.CancelScope(shield=True):
                await child.stop(stop_timeout)
