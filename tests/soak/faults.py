"""The process and database faults: SIGKILL, SIGTERM, stalls, dead LISTEN connections, and
one database restart or failover.

Each kind runs in its own loop at its own random interval until the stop event; an action
under way when the stop comes is finished, so no slot is left down. (SMTP faults are the
mail server's: tests/support/smtp_server.py.) Anything that goes wrong with a fault the
product should have handled (a SIGTERM that does not exit cleanly, leases left behind) is
recorded as a problem.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from tests.soak.probe import Probe
from tests.soak.processes import Incarnation, ProcessFailed, Slot
from tests.soak.settings import SoakSettings
from tests.soak.topology import SoakDatabase

# A slot that fails to start (the database may be down) is tried again this many times,
# this many seconds apart: what a process supervisor would do.
START_TRIES = 30
START_RETRY_SECONDS = 1.0
# How often the supervisor looks for slots that are down, seconds.
SUPERVISE_INTERVAL_SECONDS = 0.5
# Extra seconds a SIGTERMed worker gets beyond its grace and data timeout before SIGKILL.
TERM_MARGIN_SECONDS = 10.0
# Tries (one second apart) to ask the database what a cleanly exited worker left leased.
LEASE_CHECK_TRIES = 20

# One step of a fault loop; False when it found nothing to act on.
Action = Callable[[], Awaitable[bool]]
# How soon an action that found every worker busy is tried again, seconds.
BUSY_RETRY_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """One injected fault: what, when (time.time()), against what."""

    kind: str  # sigkill, sigterm, sigstop, listen_kill, pg_restart, pg_failover
    at: float
    done_at: float
    target: str
    detail: str = ""


class FaultInjector:
    """Runs the fault loops over the worker slots and the database from run() to its stop."""

    def __init__(
        self, settings: SoakSettings, workers: list[Slot], database: SoakDatabase, seed: int
    ) -> None:
        self.settings = settings
        self.workers = workers
        self.database = database
        self.random = random.Random(seed)
        self.events: list[FaultEvent] = []
        self.problems: list[str] = []
        self.start_failures: list[str] = []
        self.listen_kills_missed = 0
        self._probe = Probe(database.probe_url, "soak-faults")

    async def run(self, stop: anyio.Event, restart_database: anyio.Event) -> None:
        """Inject faults until `stop`; restart (or fail over) the database once, when
        `restart_database`."""
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._every, self.settings.kill_every, stop, self._kill_one)
                tg.start_soon(self._every, self.settings.term_every, stop, self._term_one)
                tg.start_soon(
                    self._every, self.settings.listen_kill_every, stop, self._kill_a_listener
                )
                if self.settings.stall_seconds > 0:
                    tg.start_soon(self._every, self.settings.stall_every, stop, self._stall_one)
                tg.start_soon(self._restart_database, stop, restart_database)
        finally:
            await self._probe.close()

    async def supervise(self, slots: list[Slot], stop: anyio.Event) -> None:
        """Restart any slot whose process exited on its own (a crash: the checks report it),
        as a process supervisor would, until `stop`."""
        while not stop.is_set():
            for slot in slots:
                if slot.current is None and not slot.busy:
                    slot.busy = True
                    try:
                        await self.start(slot)
                    finally:
                        slot.busy = False
            with anyio.move_on_after(SUPERVISE_INTERVAL_SECONDS):
                await stop.wait()

    async def ensure_running(self) -> None:
        """Start every worker slot that is down (after the faults stop)."""
        for slot in self.workers:
            if slot.current is None:
                await self.start(slot)

    async def start(self, slot: Slot) -> bool:
        for _ in range(START_TRIES):
            try:
                await slot.start()
                return True
            except ProcessFailed as exc:
                self.start_failures.append(str(exc).splitlines()[0])
                await anyio.sleep(START_RETRY_SECONDS)
        self.problems.append(
            f"{slot.role} slot {slot.slot} could not be started {START_TRIES} times"
        )
        return False

    # -- loops -----------------------------------------------------------------------------

    async def _every(
        self, interval: tuple[float, float], stop: anyio.Event, action: Action
    ) -> None:
        # Bounded by the stop event: the run's deadline sets it.
        delay = self.random.uniform(*interval)
        while not stop.is_set():
            with anyio.move_on_after(delay):
                await stop.wait()
            if stop.is_set():
                return
            # An action that found nothing to act on (every worker busy with another fault,
            # or restarting) is tried again shortly rather than skipped.
            done = await action()
            delay = self.random.uniform(*interval) if done else BUSY_RETRY_SECONDS

    async def _on_a_worker(self, act: Callable[[Slot], Awaitable[None]]) -> bool:
        """Do `act` to a random ready worker no other fault is busy with; False if none is."""
        ready = [s for s in self.workers if s.ready and not s.busy]
        if not ready:
            return False
        slot = self.random.choice(ready)
        slot.busy = True
        try:
            await act(slot)
        finally:
            slot.busy = False
        return True

    def _record(self, kind: str, began: float, incarnation: Incarnation) -> None:
        self.events.append(
            FaultEvent(kind, began, time.time(), incarnation.name, str(incarnation.pid))
        )

    async def _kill_one(self) -> bool:
        return await self._on_a_worker(self._kill)

    async def _kill(self, slot: Slot) -> None:
        began = time.time()
        incarnation = await slot.kill()
        self._record("sigkill", began, incarnation)
        await self.start(slot)

    async def _stall_one(self) -> bool:
        return await self._on_a_worker(self._stall)

    async def _stall(self, slot: Slot) -> None:
        began = time.time()
        try:
            incarnation = slot.pause()
            with anyio.CancelScope(shield=True):
                await anyio.sleep(self.settings.stall_seconds)
        finally:
            slot.resume()
        self._record("sigstop", began, incarnation)

    async def _term_one(self) -> bool:
        return await self._on_a_worker(self._term)

    async def _term(self, slot: Slot) -> None:
        began = time.time()
        s = self.settings
        incarnation = await slot.terminate(s.shutdown_grace + s.data_timeout + TERM_MARGIN_SECONDS)
        self._record("sigterm", began, incarnation)
        if incarnation.ending == "term_timeout":
            self.problems.append(f"{incarnation.name} did not exit within its grace after SIGTERM")
        elif incarnation.returncode != 0:
            self.problems.append(
                f"{incarnation.name} exited {incarnation.returncode} after SIGTERM"
            )
        if incarnation.owner is not None:
            incarnation.leased_after_exit = await self._leased_by(incarnation.owner)
            if incarnation.leased_after_exit:
                self.problems.append(
                    f"{incarnation.name} exited after SIGTERM still holding "
                    f"{incarnation.leased_after_exit} lease(s)"
                )
        await self.start(slot)

    async def _leased_by(self, owner: str) -> int | None:
        for _ in range(LEASE_CHECK_TRIES):
            try:
                row = await self._probe.fetchrow("leased_by", owner)
                return int(row[0])
            except Exception:
                await anyio.sleep(1.0)
        return None

    async def _kill_a_listener(self) -> bool:
        began = time.time()
        try:
            row = await self._probe.fetchrow("terminate_a_listener", str(self.random.random()))
        except Exception:
            row = None
        if row is None or not row["terminated"]:
            self.listen_kills_missed += 1
            return False
        self.events.append(FaultEvent("listen_kill", began, time.time(), f"backend {row['pid']}"))
        return True

    async def _restart_database(self, stop: anyio.Event, when: anyio.Event) -> None:
        await wait_any(stop, when)
        kind = self.database.fault_kind
        if not when.is_set():
            self.problems.append(f"the run ended before the database fault ({kind})")
            return
        with anyio.CancelScope(shield=True):
            began, done = await self.database.fault()
        self.events.append(FaultEvent(kind, began, done, "postgres"))


async def wait_any(*events: anyio.Event) -> None:
    """Return as soon as any of `events` is set."""
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)
