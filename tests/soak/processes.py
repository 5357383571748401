"""The product's processes as the soak runs them: the real `notifier` command, one per slot.

A slot (the API, or worker 0..n-1) runs at most one process at a time, so anything a slot
did at a moment belongs to the one incarnation alive then. Each incarnation's output goes to
its own log file, which the token check reads at the end.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
import anyio.abc

from tests.support.cli import NOTIFIER, cli_env, run_cli

# The project root, so `-m notifier` runs this checkout.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Seconds a process may take to say it is ready.
READY_TIMEOUT_SECONDS = 30.0
# How often the log is re-read while waiting for the ready line, seconds.
READY_POLL_SECONDS = 0.05
# Seconds a SIGKILLed process may take to be reaped.
KILL_TIMEOUT_SECONDS = 10.0

WORKER_READY = re.compile(r"worker (\S+) delivering")
API_READY = re.compile(r"API listening")

Role = Literal["api", "worker"]
# How an incarnation ended: as the soak meant it to (killed, terminated), or not.
# failed_start: it exited (or hung) before it was ready, e.g. the database was down.
Ending = Literal["killed", "terminated", "term_timeout", "crashed", "stopped", "failed_start"]


class ProcessFailed(Exception):
    """A process exited or hung before it became ready."""


@dataclass(slots=True)
class Incarnation:
    """One run of one slot's process, start to exit."""

    role: Role
    slot: int
    number: int
    pid: int
    log_path: Path
    started_at: float
    ready_at: float | None = None
    owner: str | None = None  # the lease owner a worker names itself
    ended_at: float | None = None
    ending: Ending | None = None
    returncode: int | None = None
    # Rows still leased by this owner right after a clean exit (None: not checked).
    leased_after_exit: int | None = None

    @property
    def name(self) -> str:
        return f"{self.role}{self.slot if self.role == 'worker' else ''}#{self.number}"

    def alive_at(self, moment: float, slack: float = 0.0) -> bool:
        end = self.ended_at if self.ended_at is not None else float("inf")
        return self.started_at - slack <= moment <= end + slack


class Slot:
    """Owns one slot's processes: start, SIGKILL, SIGTERM, and the record of each run.

    Watchers run in the task group given to the constructor, which must outlive the slot's
    processes. `busy` marks a slot the fault injector is already working on.
    """

    def __init__(
        self,
        role: Role,
        slot: int,
        env: Mapping[str, str],
        log_dir: Path,
        watchers: anyio.abc.TaskGroup,
    ) -> None:
        self.role = role
        self.slot = slot
        self.env = cli_env(env)
        self.log_dir = log_dir
        self.incarnations: list[Incarnation] = []
        self.busy = False
        self._watchers = watchers
        self._process: anyio.abc.Process | None = None
        self._exited = anyio.Event()

    @property
    def current(self) -> Incarnation | None:
        if self.incarnations and self.incarnations[-1].ended_at is None:
            return self.incarnations[-1]
        return None

    @property
    def ready(self) -> bool:
        current = self.current
        return current is not None and current.ready_at is not None

    async def start(self) -> Incarnation:
        """Start the next incarnation and wait until it says it is ready."""
        if self.current is not None:
            raise RuntimeError(f"{self.role}{self.slot} is already running")
        number = len(self.incarnations) + 1
        suffix = f"{self.slot}-{number}" if self.role == "worker" else str(number)
        log_path = self.log_dir / f"{self.role}-{suffix}.log"
        with log_path.open("wb") as log_file:
            process = await anyio.open_process(
                [*NOTIFIER, self.role],
                env=self.env,
                cwd=PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        incarnation = Incarnation(self.role, self.slot, number, process.pid, log_path, time.time())
        self.incarnations.append(incarnation)
        self._process = process
        self._exited = anyio.Event()
        self._watchers.start_soon(self._watch, process, incarnation, self._exited)
        await self._wait_ready(incarnation)
        return incarnation

    async def kill(self) -> Incarnation:
        """SIGKILL the running incarnation and wait until it is reaped."""
        incarnation, process = self._running()
        incarnation.ending = "killed"
        process.send_signal(signal.SIGKILL)
        with anyio.fail_after(KILL_TIMEOUT_SECONDS):
            await self._exited.wait()
        return incarnation

    def pause(self) -> Incarnation:
        """SIGSTOP it: a stall (a long GC pause, a frozen VM) that outlasts its leases."""
        incarnation, process = self._running()
        process.send_signal(signal.SIGSTOP)
        return incarnation

    def resume(self) -> None:
        """SIGCONT it after pause(); it finds out on its own what it lost meanwhile."""
        if self.current is not None and self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    async def terminate(self, within: float) -> Incarnation:
        """SIGTERM it and wait for its clean exit; past `within` s, SIGKILL it (term_timeout)."""
        incarnation, process = self._running()
        incarnation.ending = "terminated"
        process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(within):
            await self._exited.wait()
        if incarnation.ended_at is None:
            incarnation.ending = "term_timeout"
            process.send_signal(signal.SIGKILL)
            with anyio.fail_after(KILL_TIMEOUT_SECONDS):
                await self._exited.wait()
        return incarnation

    async def stop(self, within: float) -> None:
        """End of run: a clean stop, marked as such (it is not a fault)."""
        if self.current is None:
            return
        incarnation = await self.terminate(within)
        if incarnation.ending == "terminated":
            incarnation.ending = "stopped"

    def kill_now(self) -> None:
        """Last resort on the way out: no waiting, no bookkeeping beyond the mark."""
        current = self.current
        if current is not None and self._process is not None:
            current.ending = current.ending or "stopped"
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(signal.SIGKILL)
                self._process.send_signal(signal.SIGCONT)

    def _running(self) -> tuple[Incarnation, anyio.abc.Process]:
        current = self.current
        if current is None or self._process is None:
            raise RuntimeError(f"{self.role}{self.slot} is not running")
        return current, self._process

    async def _watch(
        self, process: anyio.abc.Process, incarnation: Incarnation, exited: anyio.Event
    ) -> None:
        with anyio.CancelScope(shield=True):
            returncode = await process.wait()
            await process.aclose()
        incarnation.ended_at = time.time()
        incarnation.returncode = returncode
        if incarnation.ending is None:
            incarnation.ending = "crashed"
        exited.set()

    async def _wait_ready(self, incarnation: Incarnation) -> None:
        pattern = WORKER_READY if self.role == "worker" else API_READY
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            text = await anyio.Path(incarnation.log_path).read_text(errors="replace")
            found = pattern.search(text)
            if found:
                incarnation.ready_at = time.time()
                if self.role == "worker":
                    incarnation.owner = found.group(1)
                return
            if incarnation.ended_at is not None:
                incarnation.ending = "failed_start"
                raise ProcessFailed(
                    f"{incarnation.name} exited {incarnation.returncode} before it was ready:\n"
                    + _tail(text)
                )
            await anyio.sleep(READY_POLL_SECONDS)
        incarnation.ending = "failed_start"
        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
            with anyio.fail_after(KILL_TIMEOUT_SECONDS):
                await self._exited.wait()
        raise ProcessFailed(f"{incarnation.name} was not ready within {READY_TIMEOUT_SECONDS:g}s")


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.splitlines()[-lines:])


async def run_once(args: list[str], env: Mapping[str, str], log_path: Path) -> None:
    """Run `notifier ARGS` to completion (e.g. migrate), its output kept in `log_path`;
    raise ProcessFailed if it fails."""
    done = await run_cli(*args, env=env, cwd=PROJECT_ROOT)
    output = done.stdout + done.stderr
    await anyio.Path(log_path).write_text(output)
    if done.returncode != 0:
        raise ProcessFailed(f"notifier {' '.join(args)} exited {done.returncode}:\n{_tail(output)}")
