"""CPU time of processes, read from /proc: worker processes and PostgreSQL's own."""

from __future__ import annotations

import os
from pathlib import Path

# Kernel clock ticks per second: the unit of utime/stime in /proc/<pid>/stat.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def _fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None if it is gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may itself hold spaces or parentheses.
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int, *, reaped_children: bool = False) -> float | None:
    """User plus system CPU seconds of `pid`; with `reaped_children`, also of its exited
    children it has waited for (how a postmaster keeps its finished backends' time)."""
    fields = _fields(pid)
    if fields is None:
        return None
    # After the name: state, ppid, ... utime is field 14 of the line, so index 11 here.
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def parent_of(pid: int) -> int | None:
    fields = _fields(pid)
    return None if fields is None else int(fields[1])


def children_of(parent: int) -> list[int]:
    """Live processes whose parent is `parent`."""
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _fields(int(entry.name))
        if fields is not None and int(fields[1]) == parent:
            found.append(int(entry.name))
    return found


def tree_cpu_seconds(root: int) -> float | None:
    """CPU seconds of `root`, its live children and the children it has reaped.

    For a postmaster this is the whole cluster: backends (live or exited), the WAL writer,
    the checkpointer, autovacuum.
    """
    total = cpu_seconds(root, reaped_children=True)
    if total is None:
        return None
    for child in children_of(root):
        total += cpu_seconds(child) or 0.0
    return total


def sum_cpu_seconds(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) or 0.0 for pid in pids)


def machine_busy_seconds() -> float | None:
    """CPU seconds all cores spent not idle since boot (/proc/stat), whoever spent them."""
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...
    ticks = [int(v) for v in first[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLOCK_TICKS


def self_cpu_seconds() -> float:
    """CPU seconds of this process (the runner: producer, monitor, progress)."""
    times = os.times()
    return times.user + times.system
