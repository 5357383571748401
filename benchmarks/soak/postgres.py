"""The soak's own PostgreSQL: an embedded cluster in the run directory that it may restart.

The machine's PostgreSQL is never touched: this cluster listens on a Unix socket in its own
directory only, and is stopped when the run ends.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio

from notifier.embedded import SERVER_LOG, EmbeddedPostgres

# Durability buys nothing in a throwaway cluster; enough connections for every process
# (three workers' pools and listeners, the API's pool, the soak's own).
SERVER_SETTINGS = {
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
    "max_connections": "200",
}


class SoakPostgres:
    """Owns the cluster from start() to stop(); restart() drops every connection once."""

    def __init__(self, data_dir: Path) -> None:
        self._server = EmbeddedPostgres(data_dir, SERVER_SETTINGS)
        self.log_path = self._server.data_dir / SERVER_LOG
        self.url = ""

    def start(self) -> str:
        self.url = self._server.start()
        return self.url

    async def restart(self) -> tuple[float, float]:
        """Restart it (pg_ctl restart -m fast); returns when it went down and came back."""
        began = time.time()
        await anyio.to_thread.run_sync(self._server.restart)
        return began, time.time()

    def stop(self) -> None:
        self._server.stop()
