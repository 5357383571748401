"""`notifier dev`: the whole service in one process on embedded defaults, for a first look.

An embedded PostgreSQL (unless NOTIFIER_DATABASE_URL is set), migrated on start; an SMTP
server that keeps mail in a web inbox; both HTTP listeners; and a worker. The token secret
and an API key with every scope are generated once and kept in the data directory, so links
and the README's commands survive restarts. Loopback only, unless told otherwise.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path

import anyio

from notifier import apikeys, migrations
from notifier.config import (
    ApiSettings,
    DatabaseSettings,
    RequestSettings,
    SmtpSettings,
    TokenSettings,
    WorkerSettings,
)
from notifier.database import connect, create_pool
from notifier.errors import ConfigError
from notifier.inbox import INBOX_DIRECTORY, Inbox
from notifier.mailer import SmtpTransport
from notifier.messages import Templates
from notifier.runner import (
    WorkerConfig,
    build_worker,
    http_listeners,
    keep_key_usage,
    stop_on_signals,
)
from notifier.signals import Signals
from notifier.telemetry import Telemetry, WorkerMetrics
from notifier.verifications import Policy
from notifier.web import Services

log = logging.getLogger(__name__)

SECRET_FILE = "dev-token-secret"
API_KEY_FILE = "dev-api-key"
DEV_MAIL_FROM = "notifier@localhost"
DEV_KEY_NAME = "notifier dev"


def _kept(data_dir: Path, name: str, make: Callable[[], str]) -> str:
    """A value generated on first use and kept (owner-only) in the data directory."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / name
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(make())
    return path.read_text().strip()


def dev_secret(data_dir: Path) -> str:
    """The dev token secret, so links survive restarts."""
    return _kept(data_dir, SECRET_FILE, lambda: secrets.token_urlsafe(48))


def dev_key(data_dir: Path) -> str:
    """The dev API key (every scope), so the README's curl works across restarts."""
    return _kept(data_dir, API_KEY_FILE, lambda: apikeys.generate().key)


# The names a browser on this machine reaches dev by. Dev answers no other Host: a page on
# another site that rebinds its own name to 127.0.0.1 (DNS rebinding) would otherwise read
# the open inbox, and every live link in it.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_remote(api: ApiSettings, allow_remote: bool) -> None:
    """Dev mode serves every live link in its inbox: loopback only, unless told otherwise."""
    if allow_remote:
        return
    for host, setting in (
        (api.host, "NOTIFIER_API_HOST"),
        (api.public_host, "NOTIFIER_PUBLIC_HOST"),
    ):
        if not is_loopback(host):
            raise ConfigError(
                setting,
                f"notifier dev binds only loopback addresses ({host} is not one): its inbox "
                "shows every live link and its key is printed. Pass --allow-remote to bind it "
                "anyway.",
            )


async def run_dev(
    url: str,
    shown_database: str,
    api: ApiSettings,
    sockets: tuple[socket.socket, socket.socket],
    *,
    allow_remote: bool = False,
) -> None:
    """Everything, until SIGINT or SIGTERM. `sockets` are the listeners, bound beforehand
    (with `refuse_remote` checked) so that a taken port fails before a cluster is built."""
    database = DatabaseSettings.from_env()
    env_tokens = TokenSettings.from_env(required=False, strict=False)
    public_url = (
        os.environ.get("NOTIFIER_PUBLIC_URL") or f"http://{api.public_host}:{api.public_port}"
    )
    tokens = dataclasses.replace(
        env_tokens,
        secrets=env_tokens.secrets or (dev_secret(database.data_dir),),
        public_url=public_url.rstrip("/"),
    )
    key = dev_key(database.data_dir)
    conn = await connect(url)
    try:
        await migrations.migrate(conn)
        await apikeys.create(conn, DEV_KEY_NAME, apikeys.SCOPES, key=key)
    finally:
        await conn.close()

    # Kept beside the embedded database, so mail survives a restart as the data does.
    inbox = Inbox(database.data_dir / INBOX_DIRECTORY)
    smtp_port = await inbox.start()
    smtp = dataclasses.replace(
        SmtpSettings.from_env(),
        host="127.0.0.1",
        port=smtp_port,
        tls="none",
        username=None,
        password=None,
        mail_from=DEV_MAIL_FROM,
        message_id_domain="notifier.localhost",
    )
    worker_config = WorkerConfig(
        worker=dataclasses.replace(WorkerSettings.from_env(), transport="smtp"),
        smtp=smtp,
        tokens=tokens,
        templates=Templates.from_env(),
    )
    policy = Policy.from_settings(
        tokens,
        RequestSettings.from_env(),
        max_attempts=worker_config.worker.max_attempts,
        message_id_domain=smtp.id_domain,
    )
    telemetry = Telemetry.configure("notifier-dev", prometheus=True)
    pool = await create_pool(url)
    transport = SmtpTransport(smtp)
    try:
        services = Services.over(pool, policy)
        listeners = http_listeners(
            services,
            api,
            sockets,
            internal_routes=inbox.routes,
            hosts=None if allow_remote else LOOPBACK_NAMES,
        )
        signals = Signals()
        signals.subscribe(WorkerMetrics())
        worker = build_worker(url, pool, worker_config, transport, signals)
        internal = listeners[0].url
        async with anyio.create_task_group() as watcher:
            # The inbox ends its open event streams, or the server would wait on them.
            stoppers = [worker.stop, *(listener.server.stop for listener in listeners)]
            watcher.start_soon(stop_on_signals, [*stoppers, inbox.close])
            watcher.start_soon(keep_key_usage, services)
            async with anyio.create_task_group() as services_tg:
                await services_tg.start(worker.run)
                # The sockets are already listening: requests wait in their backlog.
                for listener in listeners:
                    services_tg.start_soon(listener.server.serve, [listener.sock])
                print(
                    f"notifier dev: API {internal} (key {key}) · links {public_url} · "
                    f"inbox {internal}/dev/inbox · console {internal}/console · "
                    f"database {shown_database} · Ctrl-C to stop",
                    flush=True,
                )
            watcher.cancel_scope.cancel()
        log.info("notifier dev stopped")
    finally:
        with anyio.CancelScope(shield=True):
            await transport.aclose()
            await pool.close()
            await inbox.stop()
            await anyio.to_thread.run_sync(telemetry.shutdown)
