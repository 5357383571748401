"""The machine and software a run measured: CPU, memory, PostgreSQL, Python, the code's commit."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.cluster import Server

PROJECT_ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("asyncpg", "aiosmtplib", "anyio", "notifier")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.system()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def describe(server: Server) -> dict[str, Any]:
    dirty = _git("status", "--porcelain", "--", "notifier", "schema")
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": _os_name(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "postgresql": server.version,
        "postgresql_server": server.kind,
        "postgresql_connection": server.transport,
        "postgresql_settings": server.settings,
        "pg_stat_statements": server.statements,
        "libraries": {name: _version(name) for name in LIBRARIES},
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        # Uncommitted changes to the product (notifier/, schema/) when the run was made.
        "git_dirty": None if dirty is None else bool(dirty),
    }
