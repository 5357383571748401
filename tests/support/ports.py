"""Free TCP ports on the loopback interface, for the servers tests, the soak and the
benchmarks start."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on right now (the kernel's pick; another process could take it
    before the caller binds it, which on a test machine does not happen in practice)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
