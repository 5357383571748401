"""The event loop a long-running command runs on: uvloop where it is installed (every
platform it has wheels for; a dependency there), asyncio's own elsewhere. The same
code runs on both: anyio on its asyncio backend either way."""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from typing import TypeVarTuple, Unpack

import anyio

PosArgs = TypeVarTuple("PosArgs")


def uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def run_service(func: Callable[[Unpack[PosArgs]], Awaitable[object]], *args: *PosArgs) -> None:
    """Run a service (worker, API, inbound listener, dev) until it returns. uvloop's loop
    costs about a tenth less CPU per delivery than asyncio's, mostly in socket writes and
    callbacks."""
    anyio.run(func, *args, backend="asyncio", backend_options={"use_uvloop": uvloop_available()})
