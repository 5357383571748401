"""The HTTP server `notifier api` and `notifier dev` run: its socket, as clients meet it."""

from __future__ import annotations

import socket
from collections.abc import Callable

import anyio
import httpx
import pytest
from fastapi import FastAPI

from notifier.config import ApiSettings
from notifier.web.server import http_server, listen

pytestmark = pytest.mark.anyio


def _ping_app() -> FastAPI:
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"pong": "yes"}

    return app


async def test_kept_alive_api_connections_send_without_waiting_for_delayed_acks(
    free_tcp_port_factory: Callable[[], int],
) -> None:
    # Without TCP_NODELAY, a response written in two segments waits for the client's delayed
    # ACK (about 40 ms on Linux) on every request but the first of a kept-alive connection.
    settings = ApiSettings(host="127.0.0.1", port=free_tcp_port_factory())
    server = http_server(_ping_app(), settings)
    with listen(settings.host, settings.port, "NOTIFIER_API_PORT") as sock, anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            base = f"http://127.0.0.1:{settings.port}"
            async with httpx.AsyncClient(base_url=base) as client:
                response = await client.get("/ping")
                assert response.status_code == 200
                # The connection stays open (keep-alive): look at the server's end of it.
                (connection,) = server.server_state.connections
                accepted = connection.transport.get_extra_info("socket")
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            server.stop()
