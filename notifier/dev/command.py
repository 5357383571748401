"""`notifier dev`: the whole service in one process on embedded defaults, for a first look.

An embedded PostgreSQL (unless NOTIFIER_DATABASE_URL is set), migrated on start; an SMTP
server that keeps mail in a web inbox; both HTTP listeners; and a worker. The token secret
and an API key with every scope are generated once and kept in the data directory, so links
and the README's commands survive restarts. Loopback only, unless told otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import logging
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path

import anyio

from notifier import apikeys
from notifier.config import (
    ApiSettings,
    CodeSettings,
    DatabaseSettings,
    InboundSettings,
    RequestSettings,
    SmtpSettings,
    TokenSettings,
    WebhookSettings,
    WorkerSettings,
)
from notifier.delivery.mailer import SmtpTransport
from notifier.delivery.messages import Templates
from notifier.dev import web as inbox_web
from notifier.dev.activity import Activity, quiet_logs
from notifier.dev.inbox import INBOX_DIRECTORY, Inbox
from notifier.errors import ConfigError
from notifier.inbound.server import InboundListener
from notifier.runner import HttpPlan, WorkerConfig, WorkerPlan, serve
from notifier.settings_spec import Env, is_set, spec_of, value_of
from notifier.storage import api_keys, migrations
from notifier.storage.database import connect, create_pool
from notifier.tokens import TokenKeys
from notifier.verifications import Policy
from notifier.web.server import Listener

log = logging.getLogger(__name__)

SECRET_FILE = "dev-token-secret"
API_KEY_FILE = "dev-api-key"
DEV_MAIL_FROM = "notifier@localhost"
# Each delivery's own return path in dev, unless NOTIFIER_BOUNCE_DOMAIN says otherwise: a
# report mailed to it reaches dev's inbound listener.
DEV_BOUNCE_DOMAIN = "bounces.localhost"
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


@dataclasses.dataclass(frozen=True, slots=True)
class Replaced:
    """Settings dev replaces with its own (by group and field), and why."""

    settings: tuple[tuple[type, str], ...]
    why: str


# One line names those of each the user set, so a setting that does nothing here is not
# silently ignored.
REPLACED = (
    Replaced(
        (
            (SmtpSettings, "mail_from"),
            (SmtpSettings, "host"),
            (SmtpSettings, "port"),
            (SmtpSettings, "tls"),
            (SmtpSettings, "username"),
            (SmtpSettings, "password"),
            (SmtpSettings, "message_id_domain"),
            (WorkerSettings, "transport"),
        ),
        f"notifier dev sends to its own inbox as {DEV_MAIL_FROM}",
    ),
    Replaced(
        ((WebhookSettings, "allow_private"),),
        "notifier dev lets webhooks reach this machine's own addresses",
    ),
)


# Replaced settings whose value may already be dev's own: set so, nothing is ignored.
DEV_VALUES: dict[tuple[type, str], object] = {
    (SmtpSettings, "mail_from"): DEV_MAIL_FROM,
    (WorkerSettings, "transport"): "smtp",
    (WebhookSettings, "allow_private"): True,
}


def ignored_settings(env: Env | None = None) -> list[str]:
    """One line for each group of replaced settings the user set, naming them."""
    lines = []
    for replaced in REPLACED:
        names = [
            spec_of(group, name).name
            for group, name in replaced.settings
            if is_set(group, name, env) and not _as_dev_has_it(group, name, env)
        ]
        if names:
            lines.append(f"ignoring {', '.join(names)}: {replaced.why}")
    return lines


def _as_dev_has_it(group: type, name: str, env: Env | None) -> bool:
    if (group, name) not in DEV_VALUES:
        return False
    return bool(value_of(group, name, env) == DEV_VALUES[group, name])


def ready_block(rows: list[tuple[str, str]]) -> str:
    """The ready message: a labelled line for each address, so each can be read (and
    copied) on its own."""
    width = max(len(label) for label, _ in rows)
    body = "\n".join(f"  {label:<{width}}  {value}" for label, value in rows)
    return f"notifier dev is ready\n{body}\nCtrl-C to stop"


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
    quiet_logs()
    activity = Activity()
    for line in ignored_settings():
        print(line, flush=True)
    database = DatabaseSettings.from_env()
    tokens = _tokens(api, database.data_dir)
    key = dev_key(database.data_dir)
    await _prepare(url, key)
    # Kept beside the embedded database, so mail survives a restart as the data does.
    inbox = Inbox(database.data_dir / INBOX_DIRECTORY)
    smtp = _smtp(await inbox.start())
    # On one developer's machine, a webhook receiver is on loopback too.
    webhooks = dataclasses.replace(WebhookSettings.from_env(), allow_private=True)
    worker = WorkerConfig(
        worker=dataclasses.replace(WorkerSettings.from_env(), transport="smtp"),
        smtp=smtp,
        tokens=tokens,
        templates=Templates.from_env(),
        webhooks=webhooks,
    )
    policy = Policy.from_settings(
        tokens,
        RequestSettings.from_env(),
        message_id_domain=smtp.id_domain,
        codes=CodeSettings.from_env(),
    )
    http = HttpPlan(
        policy,
        api,
        sockets,
        internal_routes=lambda app: inbox_web.add_routes(
            app, inbox, database.data_dir / API_KEY_FILE, frozenset({_origin(sockets[1])})
        ),
        hosts=None if allow_remote else LOOPBACK_NAMES,
        webhooks=webhooks,
    )

    def ready(listeners: list[Listener]) -> None:
        internal = listeners[0].url
        key_file = database.data_dir / API_KEY_FILE
        rows = [
            ("API", internal),
            ("key", f"{key}  (also in {key_file})"),
            ("inbox", f"{internal}/dev/inbox"),
            ("console", f"{internal}/console"),
            ("links", tokens.public_url),
            ("bounces", f"smtp://127.0.0.1:{inbound_port}"),
            ("database", shown_database),
        ]
        print(ready_block(rows), flush=True)

    def stopping() -> None:
        # Dev's log shows warnings only: without this the terminal says nothing until exit.
        print("stopping (Ctrl-C again to quit at once)", flush=True)

    reports_pool = await create_pool(url, max_size=2)
    inbound_settings = InboundSettings.from_env()
    reports = InboundListener.over(
        reports_pool,
        TokenKeys(tokens.secrets),
        smtp.bounce_domain or DEV_BOUNCE_DOMAIN,
        worker.worker.suppression_ttl,
        inbound_settings,
    )
    inbound_port = await reports.start(
        "127.0.0.1", inbound_settings.port if is_set(InboundSettings, "port") else 0
    )
    try:
        await serve(
            url,
            "notifier-dev",
            database.statement_cache_size,
            http=http,
            worker=WorkerPlan(worker, url, transport=SmtpTransport(smtp), observer=activity),
            # The inbox ends its open event streams, or the server would wait on them.
            also_stop=[inbox.close, stopping],
            also_run=[functools.partial(activity.follow, url)],
            on_ready=ready,
        )
        print("notifier dev stopped", flush=True)
    finally:
        with anyio.CancelScope(shield=True):
            await reports.stop()
            await reports_pool.close()
            await inbox.stop()


def _origin(bound: socket.socket) -> str:
    """The origin a bound listener answers at: the check tab fetches the public listener's
    links there, and nowhere NOTIFIER_PUBLIC_URL could point to."""
    host, port = bound.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _tokens(api: ApiSettings, data_dir: Path) -> TokenSettings:
    """The token settings, with dev's own secret unless one is given, and links to the
    public listener's own address unless NOTIFIER_PUBLIC_URL says otherwise."""
    given = TokenSettings.from_env(required=False, strict=False)
    public_url = (
        given.public_url
        if is_set(TokenSettings, "public_url")
        else f"http://{api.public_host}:{api.public_port}"
    )
    return dataclasses.replace(
        given,
        secrets=given.secrets or (dev_secret(data_dir),),
        public_url=public_url.rstrip("/"),
    )


async def _prepare(url: str, key: str) -> None:
    """The schema migrated and the dev key registered."""
    conn = await connect(url)
    try:
        await migrations.migrate(conn)
        await api_keys.create(conn, DEV_KEY_NAME, apikeys.SCOPES, key=key)
    finally:
        await conn.close()


def _smtp(inbox_port: int) -> SmtpSettings:
    """The SMTP settings, pointed at the dev inbox."""
    return dataclasses.replace(
        SmtpSettings.from_env(),
        host="127.0.0.1",
        port=inbox_port,
        tls="none",
        username=None,
        password=None,
        mail_from=DEV_MAIL_FROM,
        message_id_domain="notifier.localhost",
        bounce_domain=SmtpSettings.from_env().bounce_domain or DEV_BOUNCE_DOMAIN,
    )
