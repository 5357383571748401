"""`notifier dev` as a developer starts it: loopback only, its own key, ports checked first;
and what its terminal says: a labelled ready block, then one line per step a request takes."""

from __future__ import annotations

import re
import signal
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiosmtplib
import anyio
import httpx
import pytest

from tests.support.apps import bearer
from tests.support.cli import RunningCli, run_cli, running_cli
from tests.support.dev_ready import Ready, wait_until_ready
from tests.support.reports import dsn

pytestmark = pytest.mark.anyio

WAIT = 30


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


async def dev_key_and_links(env: dict[str, str]) -> tuple[str, str]:
    """Start `notifier dev`, read its ready block, check the key it prints, stop it."""
    async with running_cli("dev", env=env, capture_stdout=True) as cli:
        with anyio.fail_after(WAIT):
            ready = await wait_until_ready(cli)
        async with httpx.AsyncClient(base_url=ready.url) as client:
            headers = bearer(ready.key)
            assert (await client.get("/v1/suppressions", headers=headers)).status_code == 200
            assert (await client.get("/v1/suppressions")).status_code == 401
        async with httpx.AsyncClient(base_url=ready.links) as client:
            assert (await client.get("/healthz")).status_code == 200
    return ready.key, ready.links


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
    first, links = await dev_key_and_links(env)
    second, _ = await dev_key_and_links(env)
    assert first == second
    assert links == f"http://127.0.0.1:{env['NOTIFIER_PUBLIC_PORT']}"
    kept = data / "dev-api-key"
    assert kept.read_text().strip() == first
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600


@pytest.fixture
def dev_env(
    database_url: str, tmp_path: Path, free_tcp_port_factory: Callable[[], int]
) -> dict[str, str]:
    return {
        "NOTIFIER_DATABASE_URL": database_url,
        "NOTIFIER_DATA_DIR": str(tmp_path / "data"),
        "NOTIFIER_API_PORT": str(free_tcp_port_factory()),
        "NOTIFIER_PUBLIC_PORT": str(free_tcp_port_factory()),
    }


@asynccontextmanager
async def dev_running(
    env: dict[str, str],
) -> AsyncIterator[tuple[RunningCli, Ready, httpx.AsyncClient]]:
    """`notifier dev`, once its ready block is printed, and a client of its API with its key."""
    async with running_cli("dev", env=env, capture_stdout=True) as cli:
        with anyio.fail_after(WAIT):
            ready = await wait_until_ready(cli)
        async with httpx.AsyncClient(base_url=ready.url, headers=bearer(ready.key)) as api:
            yield cli, ready, api


async def request(api: httpx.AsyncClient, email: str) -> str:
    """A verification requested of dev's API; its id."""
    created = await api.post(
        "/v1/verifications",
        json={"user_id": "ada", "email": email, "purpose": "signup"},
        headers={"Idempotency-Key": f"activity-{email}"},
    )
    assert created.status_code == 202, created.text
    verification: str = created.json()["id"]
    return verification


async def delivered_link(api: httpx.AsyncClient) -> str:
    """The link of the first message in dev's inbox, once there is one."""
    with anyio.fail_after(WAIT):
        while True:
            listed = (await api.get("/dev/inbox.json")).json()
            if listed:
                link: str = listed[0]["link"]
                return link
            await anyio.sleep(0.05)


async def activity_line(cli: RunningCli, word: str, verification: str) -> str:
    """Dev's activity line saying `word` of `verification` (named by its short id)."""
    said = re.compile(rf" {word} +{verification[:8]}\b")
    with anyio.fail_after(WAIT):
        while True:
            for line in cli.stdout_lines:
                if said.search(line):
                    return line
            await anyio.sleep(0.05)


async def test_dev_prints_the_key_on_a_line_of_its_own_with_where_it_is_kept(
    dev_env: dict[str, str],
) -> None:
    async with dev_running(dev_env) as (_, ready, _api):
        kept = Path(dev_env["NOTIFIER_DATA_DIR"]) / "dev-api-key"
        assert ready.rows["key"] == f"{kept.read_text().strip()}  (also in {kept})"
        assert ready.lines[0] == "notifier dev is ready"
        assert ready.lines[-1] == "Ctrl-C to stop"
        assert list(ready.rows) == [
            "API", "key", "inbox", "console", "links", "bounces", "database"
        ]  # fmt: skip


async def test_dev_prints_an_accepted_line_with_the_address_redacted(
    dev_env: dict[str, str],
) -> None:
    async with dev_running(dev_env) as (cli, _, api):
        verification = await request(api, "ada@example.org")
        line = await activity_line(cli, "accepted", verification)
    assert "a***@example.org" in line and "signup" in line
    assert "ada@example.org" not in "\n".join(cli.stdout_lines)


async def test_dev_prints_a_sent_line_with_the_mail_servers_reply(
    dev_env: dict[str, str],
) -> None:
    async with dev_running(dev_env) as (cli, _, api):
        verification = await request(api, "ada@example.org")
        await delivered_link(api)
        line = await activity_line(cli, "sent", verification)
    assert re.search(r"\b250\b", line), line


async def test_dev_prints_a_confirmed_line_once_the_link_is_confirmed(
    dev_env: dict[str, str],
) -> None:
    async with dev_running(dev_env) as (cli, _, api):
        verification = await request(api, "ada@example.org")
        link = httpx.URL(await delivered_link(api))
        async with httpx.AsyncClient() as browser:
            token = link.params["token"]
            confirmed = await browser.post(link.copy_with(query=None), data={"token": token})
            assert confirmed.status_code == 200, confirmed.text
        await activity_line(cli, "confirmed", verification)


async def test_dev_logs_started_server_process_at_most_once(dev_env: dict[str, str]) -> None:
    async with dev_running(dev_env) as (cli, ready, _):
        async with httpx.AsyncClient(base_url=ready.links) as client:
            assert (await client.get("/healthz")).status_code == 200
        cli.process.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT):
            assert await cli.process.wait() == 0, cli.output
    assert cli.output.count("Started server process") <= 1, cli.output


async def test_dev_says_it_ignores_notifier_mail_from_when_it_is_set(
    dev_env: dict[str, str],
) -> None:
    env = {**dev_env, "NOTIFIER_MAIL_FROM": "hello@example.com"}
    async with dev_running(env) as (cli, _, _api):
        [said] = [line for line in cli.stdout_lines if line.startswith("ignoring ")]
    assert "NOTIFIER_MAIL_FROM" in said and "notifier@localhost" in said, said


async def test_dev_names_no_ignored_setting_when_none_is_set(dev_env: dict[str, str]) -> None:
    async with dev_running(dev_env) as (cli, _, _api):
        assert not [line for line in cli.stdout_lines if line.startswith("ignoring ")]


async def bounced(api: httpx.AsyncClient, ready: Ready) -> str:
    """A verification sent to dev's inbox, then refused by a DSN mailed to its own return
    path at dev's inbound listener; its id."""
    verification = await request(api, "ada@example.org")
    status = ""
    with anyio.fail_after(WAIT):
        while status != "sent":
            await anyio.sleep(0.1)
            status = (await api.get(f"/v1/verifications/{verification}")).json()["status"]
    [listed] = (await api.get("/dev/inbox.json")).json()
    raw = (await api.get(f"/dev/inbox/{listed['number']}/raw")).content
    return_path = re.search(rb"Return-Path: <([^>]+)>", raw)
    assert return_path and return_path.group(1).endswith(b"@bounces.localhost")
    to = return_path.group(1).decode()
    smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=ready.bounces_port)
    async with smtp:
        await smtp.sendmail("MAILER-DAEMON@localhost", [to], dsn(to, "ada@example.org"))
    return verification


async def test_dev_takes_a_bounce_mailed_to_a_deliverys_own_return_path(
    dev_env: dict[str, str],
) -> None:
    async with dev_running(dev_env) as (_, ready, api):
        verification = await bounced(api, ready)
        status = (await api.get(f"/v1/verifications/{verification}")).json()["status"]
    assert status == "bounced"


async def test_dev_prints_a_failed_line_with_its_reason(dev_env: dict[str, str]) -> None:
    async with dev_running(dev_env) as (cli, ready, api):
        verification = await bounced(api, ready)
        line = await activity_line(cli, "failed", verification)
    assert line.split()[3:] == ["bounced"], line


async def test_dev_says_it_is_stopping_and_then_that_it_stopped(dev_env: dict[str, str]) -> None:
    async with dev_running(dev_env) as (cli, _, _):
        cli.process.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT):
            assert await cli.process.wait() == 0, cli.output
    printed = cli.stdout_lines
    assert printed[-2:] == ["stopping (Ctrl-C again to quit at once)", "notifier dev stopped"]
