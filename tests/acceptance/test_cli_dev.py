"""`notifier dev` as a developer starts it: loopback only, its own key, ports checked first."""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from pathlib import Path

import aiosmtplib
import anyio
import httpx
import pytest

from tests.support.apps import bearer
from tests.support.cli import run_cli, running_cli
from tests.support.reports import dsn

pytestmark = pytest.mark.anyio

WAIT = 30
READY = "notifier dev: API "


@pytest.mark.parametrize("setting", ["NOTIFIER_API_HOST", "NOTIFIER_PUBLIC_HOST"])
async def test_dev_refuses_a_non_loopback_address_before_building_anything(
    tmp_path: Path, setting: str
) -> None:
    result = await run_cli(
        "dev", env={setting: "0.0.0.0", "NOTIFIER_DATA_DIR": str(tmp_path / "data")}
    )
    assert result.returncode == 2
    assert setting in result.stderr and "--allow-remote" in result.stderr
    assert not (tmp_path / "data" / "pgdata").exists()


async def test_dev_reports_a_taken_port_before_building_a_cluster(
    tmp_path: Path, free_tcp_port_factory: Callable[[], int]
) -> None:
    port = free_tcp_port_factory()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    async with listener:
        result = await run_cli(
            "dev",
            env={"NOTIFIER_API_PORT": str(port), "NOTIFIER_DATA_DIR": str(tmp_path / "data")},
        )
    assert result.returncode == 2 and "NOTIFIER_API_PORT" in result.stderr
    assert not (tmp_path / "data" / "pgdata").exists()


async def dev_line(env: dict[str, str]) -> tuple[str, str]:
    """Start `notifier dev`, read its ready line, check the key it prints, stop it."""
    async with running_cli("dev", env=env, capture_stdout=True) as cli:
        with anyio.fail_after(WAIT):
            line = await cli.wait_for_line(READY, stream="stdout")
        found = re.search(r"API (\S+) \(key (nfk_\S+)\) · links (\S+)", line)
        assert found, line
        url, key, links = found.groups()
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/v1/suppressions", headers=bearer(key))).status_code == 200
            assert (await client.get("/v1/suppressions")).status_code == 401
        async with httpx.AsyncClient(base_url=links) as client:
            assert (await client.get("/healthz")).status_code == 200
    return key, links


async def test_dev_makes_one_key_prints_it_and_keeps_it_private(
    database_url: str, tmp_path: Path, free_tcp_port_factory: Callable[[], int]
) -> None:
    data = tmp_path / "data"
    env = {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_DATA_DIR": str(data),
        "NOTIFIER_API_PORT": str(free_tcp_port_factory()),
        "NOTIFIER_PUBLIC_PORT": str(free_tcp_port_factory()),
    }
    first, links = await dev_line(env)
    second, _ = await dev_line(env)
    assert first == second
    assert links == f"http://127.0.0.1:{env['NOTIFIER_PUBLIC_PORT']}"
    kept = data / "dev-api-key"
    assert kept.read_text().strip() == first
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600


async def test_dev_takes_a_bounce_mailed_to_a_deliverys_own_return_path(
    database_url: str, tmp_path: Path, free_tcp_port_factory: Callable[[], int]
) -> None:
    env = {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_DATA_DIR": str(tmp_path / "data"),
        "NOTIFIER_API_PORT": str(free_tcp_port_factory()),
        "NOTIFIER_PUBLIC_PORT": str(free_tcp_port_factory()),
    }
    async with running_cli("dev", env=env, capture_stdout=True) as cli:
        with anyio.fail_after(WAIT):
            line = await cli.wait_for_line(READY, stream="stdout")
        found = re.search(r"API (\S+) \(key (nfk_\S+)\).* bounces smtp://127\.0\.0\.1:(\d+)", line)
        assert found, line
        url, key, port = found.groups()
        async with httpx.AsyncClient(base_url=url, headers=bearer(key)) as api:
            created = await api.post(
                "/v1/verifications",
                json={"user_id": "ada", "email": "ada@example.org"},
                headers={"Idempotency-Key": "bounce-1"},
            )
            verification = f"/v1/verifications/{created.json()['id']}"
            status = ""
            with anyio.fail_after(WAIT):
                while status != "sent":
                    await anyio.sleep(0.1)
                    status = (await api.get(verification)).json()["status"]
            [listed] = (await api.get("/dev/inbox.json")).json()
            raw = (await api.get(f"/dev/inbox/{listed['number']}/raw")).content
            return_path = re.search(rb"Return-Path: <([^>]+)>", raw)
            assert return_path and return_path.group(1).endswith(b"@bounces.localhost")
            to = return_path.group(1).decode()
            async with aiosmtplib.SMTP(hostname="127.0.0.1", port=int(port)) as smtp:
                await smtp.sendmail("MAILER-DAEMON@localhost", [to], dsn(to, "ada@example.org"))
            assert (await api.get(verification)).json()["status"] == "bounced"
