"""`notifier dev`: the whole service in one process on embedded defaults, for a first look.

An embedded PostgreSQL (unless NOTIFIER_DATABASE_URL is set), migrated on start; an SMTP
server that keeps mail in a web inbox; the API; and a worker. The token secret is generated
once and kept in the data directory, so links survive restarts.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
from pathlib import Path

import anyio

from notifier import migrations
from notifier.api import create_app
from notifier.config import (
    ApiSettings,
    DatabaseSettings,
    RequestSettings,
    SmtpSettings,
    TokenSettings,
    WorkerSettings,
)
from notifier.database import connect, create_pool
from notifier.inbox import INBOX_DIRECTORY, Inbox
from notifier.mailer import SmtpTransport
from notifier.messages import Templates
from notifier.runner import WorkerConfig, build_worker, http_server, listen, stop_on_signals
from notifier.signals import Signals
from notifier.telemetry import Telemetry, WorkerMetrics
from notifier.verifications import Policy

log = logging.getLogger(__name__)

SECRET_FILE = "dev-token-secret"
DEV_MAIL_FROM = "notifier@localhost"


def dev_secret(data_dir: Path) -> str:
    """The dev token secret: generated on first use, kept (owner-only) in the data directory."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / SECRET_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(48))
    return path.read_text().strip()


async def run_dev(url: str, shown_database: str) -> None:
    database = DatabaseSettings.from_env()
    api = ApiSettings.from_env()
    env_tokens = TokenSettings.from_env(required=False)
    public_url = os.environ.get("NOTIFIER_PUBLIC_URL") or f"http://{api.host}:{api.port}"
    tokens = dataclasses.replace(
        env_tokens,
        secrets=env_tokens.secrets or (dev_secret(database.data_dir),),
        public_url=public_url.rstrip("/"),
    )
    conn = await connect(url)
    try:
        await migrations.migrate(conn)
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
    sock = listen(api)
    telemetry = Telemetry.configure("notifier-dev", prometheus=True)
    pool = await create_pool(url)
    transport = SmtpTransport(smtp)
    try:
        app = create_app(
            url, policy, max_body_bytes=api.max_body_bytes, pool=pool, extra_routes=inbox.routes
        )
        server = http_server(app, api)
        signals = Signals()
        signals.subscribe(WorkerMetrics())
        worker = build_worker(url, pool, worker_config, transport, signals)
        async with anyio.create_task_group() as watcher:
            # The inbox ends its open event streams, or the server would wait on them.
            watcher.start_soon(stop_on_signals, [worker.stop, server.stop, inbox.close])
            async with anyio.create_task_group() as services:
                await services.start(worker.run)
                # The socket is already listening: requests wait in its backlog until serving.
                services.start_soon(server.serve, [sock])
                print(
                    f"notifier dev: API {public_url} · inbox {public_url}/dev/inbox · "
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
