"""`notifier dev` binds loopback, but a web page the developer visits can still reach it.

DNS rebinding: a page on attacker.example re-resolves its own name to 127.0.0.1, and its
scripts then read same-origin responses from the dev listeners, whose open inbox lists every
live verification link. Binding loopback does not stop this; answering only loopback host
names does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest

from tests.support.apps import bearer
from tests.support.cli import running_cli
from tests.support.dev_ready import wait_until_ready

pytestmark = pytest.mark.anyio

WAIT = 30
REBOUND_HOST = "rebind.attacker.example"


async def test_dev_answers_no_foreign_host_name(
    database_url: str, tmp_path: Path, free_tcp_port_factory: Callable[[], int]
) -> None:
    port = free_tcp_port_factory()
    env = {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_DATA_DIR": str(tmp_path / "data"),
        "NOTIFIER_API_PORT": str(port),
        "NOTIFIER_PUBLIC_PORT": str(free_tcp_port_factory()),
    }
    async with running_cli("dev", env=env, capture_stdout=True) as cli:
        with anyio.fail_after(WAIT):
            ready = await wait_until_ready(cli)
        url, key = ready.url, ready.key
        async with httpx.AsyncClient(base_url=url) as client:
            created = await client.post(
                "/v1/verifications",
                json={"user_id": "dev-user", "email": "dev@example.com"},
                headers={**bearer(key), "Idempotency-Key": "rebind-1"},
            )
            assert created.status_code == 202, created.text
            own = await client.get("/dev/inbox.json", headers=bearer(key))
            # What the rebound page's script sends: the attacker's name, the same socket.
            rebound = await client.get(
                "/dev/inbox.json", headers={**bearer(key), "Host": f"{REBOUND_HOST}:{port}"}
            )
    assert own.status_code == 200
    assert rebound.status_code in (400, 403, 421), rebound.text
