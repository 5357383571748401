"""The HTTP servers under test: `notifier api` and `notifier dev` processes, configured by env.

Each API process listens on a port of its own on 127.0.0.1 (two processes stand for two
replicas behind a load balancer; the producers spread their connections over them). Their
settings are the library defaults but for the database, the port and the token secret the
workers share.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.processes import Child, started
from benchmarks.producer import MAIL_FROM, TOKEN_SECRET
from benchmarks.sink import HOST
from benchmarks.workers import PROJECT_ROOT
from tests.support import dev_ready
from tests.support.cli import NOTIFIER, cli_env
from tests.support.ports import free_port

# What each logs (or prints) once its socket listens.
API_READY_LINE = "public pages listening on"  # logged once both listeners listen
DEV_READY_LINE = dev_ready.LAST  # the ready block's last line


@dataclass(frozen=True, slots=True)
class ApiServer:
    child: Child
    port: int


def _env(database_url: str, port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    return cli_env(
        {
            "NOTIFIER_DATABASE_URL": database_url,
            "NOTIFIER_API_HOST": HOST,
            "NOTIFIER_API_PORT": str(port),
            # The public listener is not under test; it needs a port of its own all the same.
            "NOTIFIER_PUBLIC_HOST": HOST,
            "NOTIFIER_PUBLIC_PORT": str(free_port()),
            "NOTIFIER_TOKEN_SECRET": TOKEN_SECRET,
            "NOTIFIER_MAIL_FROM": MAIL_FROM,
            # Never met, always counted (see producer.UNREACHABLE_LIMITS).
            "NOTIFIER_RESEND_LIMIT": "1000000",
            "NOTIFIER_DOMAIN_LIMIT": str(10**9),
            "NOTIFIER_CLIENT_LIMIT": str(10**9),
            "NOTIFIER_GLOBAL_LIMIT": str(10**9),
            **(extra or {}),
        }
    )


@contextlib.asynccontextmanager
async def running_apis(
    database_url: str, count: int, log_dir: Path, name: str
) -> AsyncIterator[list[ApiServer]]:
    """`count` `notifier api` processes, each listening on its own port, stopped by SIGTERM."""
    async with contextlib.AsyncExitStack() as stack:
        servers = []
        for i in range(count):
            port = free_port()
            child = await stack.enter_async_context(
                started(
                    f"{name}-api{i}",
                    [*NOTIFIER, "api"],
                    log_dir=log_dir,
                    ready=API_READY_LINE,
                    env=_env(database_url, port),
                    cwd=PROJECT_ROOT,
                )
            )
            servers.append(ApiServer(child, port))
        yield servers


@contextlib.asynccontextmanager
async def running_dev(database_url: str, log_dir: Path, name: str) -> AsyncIterator[ApiServer]:
    """`notifier dev` on the run's database (its own worker delivers into its own inbox)."""
    port = free_port()
    env = _env(database_url, port, {"NOTIFIER_DATA_DIR": str(log_dir / f"{name}-data")})
    async with started(
        name, [*NOTIFIER, "dev"], log_dir=log_dir, ready=DEV_READY_LINE, env=env, cwd=PROJECT_ROOT
    ) as child:
        yield ApiServer(child, port)
