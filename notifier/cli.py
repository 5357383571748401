"""The `notifier` command: one subcommand per job, each a thin shell over the package."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import anyio

from notifier.config import (
    ApiSettings,
    CodeSettings,
    DatabaseSettings,
    InboundSettings,
    LogSettings,
    MessageSettings,
    RequestSettings,
    RetentionSettings,
    SmtpSettings,
    Thresholds,
    TokenSettings,
    WebhookSettings,
    WorkerSettings,
)
from notifier.errors import ConfigError, NotifierError, UsageError
from notifier.event_loop import run_service
from notifier.logs import configure_logging
from notifier.settings_spec import describe_settings, environment
from notifier.storage import migrations
from notifier.storage.database import (
    ONE_SHOT_CACHE,
    PERMISSION_DENIED,
    connect,
    database_url,
    describe,
)
from notifier.version import __version__

log = logging.getLogger("notifier")

# The commands that run until stopped: their INFO lines are the record of what they did.
# Every other command answers a person, who sees only warnings and errors unless -v asks.
SERVICES = frozenset({"worker", "api", "inbound", "dev"})


def log_level(command: str, verbose: bool) -> int:
    """The lowest level a command logs at."""
    if verbose:
        return logging.DEBUG
    return logging.INFO if command in SERVICES else logging.WARNING


@contextlib.contextmanager
def _database(settings: DatabaseSettings, *, session: bool = False) -> Iterator[str]:
    """The URL a command for a person uses (the session URL with `session`), named in the
    log without its credentials, so -v answers "which database did that go to?"."""
    with database_url(settings) as url:
        target = settings.listen_url_for(url) if session else url
        log.info("using the database at %s", describe(target))
        yield target


async def _migrate(url: str, show_status: bool) -> int:
    # `url` must reach a session of its own: the migration lock is held across statements.
    conn = await connect(url)
    try:
        found = migrations.discover()
        if show_status:
            current = await migrations.status(conn, found)
            for migration in found:
                state = "pending" if migration in current.pending else "applied"
                print(f"{migration.version:04d}_{migration.name}: {state}")
            for version in current.unknown:
                print(f"{version:04d}: applied, unknown to this release")
            return 1 if current.pending else 0
        applied = await migrations.migrate(conn, found)
        if applied:
            print("applied " + ", ".join(f"{m.version:04d}_{m.name}" for m in applied))
        else:
            print("schema is up to date")
        return 0
    finally:
        await conn.close()


def cmd_migrate(args: argparse.Namespace) -> int:
    with _database(DatabaseSettings.from_env(), session=True) as url:
        return anyio.run(_migrate, url, args.status, backend="asyncio")


def cmd_worker(args: argparse.Namespace) -> int:
    from notifier.runner import WorkerConfig, run_worker

    config = WorkerConfig.from_env()  # invalid settings stop here, before any connection
    with database_url(config.database) as url:
        run_service(run_worker, url, config)
    return 0


def cmd_inbound(args: argparse.Namespace) -> int:
    from notifier.config import InboundSettings
    from notifier.runner import run_inbound

    smtp, inbound = SmtpSettings.from_env(), InboundSettings.from_env()
    if smtp.bounce_domain is None:
        raise ConfigError(
            "NOTIFIER_BOUNCE_DOMAIN", "is required: the domain whose mail `notifier inbound` takes"
        )
    with database_url(DatabaseSettings.from_env()) as url:
        run_service(run_inbound, url, smtp, inbound)
    return 0


def cmd_api(args: argparse.Namespace) -> int:
    from notifier.config import ApiSettings
    from notifier.runner import run_api
    from notifier.verifications import Policy

    policy, settings = Policy.from_env(), ApiSettings.from_env()
    database, webhooks = DatabaseSettings.from_env(), WebhookSettings.from_env()
    with database_url(database) as url:
        run_service(run_api, url, policy, settings, database, webhooks)
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from notifier.config import ApiSettings
    from notifier.dev.command import refuse_remote, run_dev
    from notifier.runner import bind_listeners

    settings, api = DatabaseSettings.from_env(), ApiSettings.from_env()
    refuse_remote(api, args.allow_remote)
    # Bound first: a taken port is reported before an embedded cluster is built or started.
    sockets = bind_listeners(api)
    with database_url(settings) as url:
        # The embedded server's URL names its password file, not the password; a configured
        # URL may hold one, so only where it points is shown.
        shown = f"NOTIFIER_DATABASE_URL ({describe(url)})" if settings.url else url
        run = functools.partial(run_dev, url, shown, api, sockets, allow_remote=args.allow_remote)
        run_service(run)
    return 0


async def _suppressions(url: str, clear: str | None) -> int:
    from notifier.config import RequestSettings
    from notifier.redact import printable
    from notifier.storage import suppressions

    separators = RequestSettings.from_env().subaddress_separators
    conn = await connect(url, statement_cache_size=ONE_SHOT_CACHE)
    try:
        if clear is not None:
            address = await suppressions.clear(conn, clear, separators)
            if address is None:
                print(f"{printable(clear)} was not suppressed")
                return 1
            print(f"cleared {printable(address)}: requests for it are accepted again")
            return 0
        found = await suppressions.active(conn)
        for entry in found:
            until = f"{entry.expires_at:%Y-%m-%d %H:%M}" if entry.expires_at else "cleared"
            # A reason is a mail server's words: escaped, so no reply can move the cursor,
            # clear the screen or start a row of its own on the operator's terminal.
            print(
                f"{printable(entry.address)}\t{entry.suppressed_at:%Y-%m-%d %H:%M}\t"
                f"until {until}\t{printable(entry.reason)}"
            )
        if not found:
            print("no suppressed addresses")
        return 0
    finally:
        await conn.close()


def cmd_suppressions(args: argparse.Namespace) -> int:
    if args.action == "clear" and not args.address:
        raise UsageError("suppressions clear needs the ADDRESS to clear")
    clear = args.address if args.action == "clear" else None
    with _database(DatabaseSettings.from_env()) as url:
        return anyio.run(_suppressions, url, clear, backend="asyncio")


async def _stats(url: str, args: argparse.Namespace) -> int:
    import orjson
    from rich.console import Console

    from notifier.config import Thresholds
    from notifier.storage.stats import collect, render

    conn = await connect(url, statement_cache_size=ONE_SHOT_CACHE)
    try:
        stats = await collect(conn, args.window, Thresholds.from_env())
    finally:
        await conn.close()
    if args.json:
        print(orjson.dumps(stats.as_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        render(stats, Console())
    return 1 if stats.alerts else 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _database(DatabaseSettings.from_env()) as url:
        return anyio.run(_stats, url, args, backend="asyncio")


async def _cleanup(url: str) -> int:
    from notifier.config import RequestSettings, RetentionSettings
    from notifier.storage.database import create_pool
    from notifier.storage.maintenance import cleanup

    settings, window = RetentionSettings.from_env(), RequestSettings.from_env().resend_window
    code_window = CodeSettings.from_env().failure_window
    pool = await create_pool(url, max_size=1, statement_cache_size=ONE_SHOT_CACHE)
    try:
        report = await cleanup(pool, settings, window, code_window)
    finally:
        await pool.close()
    if report.skipped:
        print("another process is cleaning up; nothing done")
        return 0
    print(
        f"scrubbed {report.scrubbed} addresses, deleted {report.deleted} finished deliveries, "
        f"expired {report.suppressions_expired} suppressions, forgot {report.events_forgotten} "
        "events"
    )
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    with _database(DatabaseSettings.from_env()) as url:
        return anyio.run(_cleanup, url, backend="asyncio")


async def _keys(url: str, args: argparse.Namespace) -> int:
    from notifier.storage import api_keys

    conn = await connect(url)
    try:
        if args.action == "create":
            key = None
            if args.key_from_env is not None:
                key = environment().get(args.key_from_env, "").strip()
                if not key:
                    raise UsageError(f"{args.key_from_env} is unset or empty")
            scopes = [s for given in args.scope or ["request"] for s in given.split(",") if s]
            new = await api_keys.create(
                conn, args.name, scopes, key=key, return_urls=args.return_url
            )
            if key is None:
                # The key alone on stdout, so `KEY=$(notifier keys create app)` works.
                print(new.key)
                print(f"created key {new.id} ({args.name}); it is shown only now", file=sys.stderr)
            else:
                print(f"key {new.id} ({args.name}) is registered")
            return 0
        if args.action == "revoke":
            revoked_at = await api_keys.revoke(conn, args.id)
            print(f"key {args.id} revoked at {revoked_at:%Y-%m-%d %H:%M:%S %Z}")
            return 0
        if args.action == "return-urls":
            await api_keys.set_return_urls(conn, args.id, args.prefix or None)
            narrowed = ", ".join(args.prefix) if args.prefix else "all of NOTIFIER_RETURN_URLS"
            print(f"key {args.id} may send people back to: {narrowed}")
            return 0
        rows = await api_keys.listing(conn)
        if args.json:
            import orjson

            print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
            return 0
        for row in rows:
            used = f"{row['last_used_at']:%Y-%m-%d %H:%M}" if row["last_used_at"] else "never"
            state = f"revoked {row['revoked_at']:%Y-%m-%d %H:%M}" if row["revoked_at"] else "live"
            print(
                f"{row['id']}\t{row['name']}\t{','.join(row['scopes'])}\t"
                f"created {row['created_at']:%Y-%m-%d %H:%M}\tlast used {used}\t{state}"
            )
        if not rows:
            print("no API keys: create one with `notifier keys create NAME --scope request`")
        return 0
    finally:
        await conn.close()


async def _webhooks(url: str, args: argparse.Namespace) -> int:
    import uuid

    from notifier.storage import webhooks
    from notifier.tokens import TokenKeys

    settings = WebhookSettings.from_env()
    conn = await connect(url)
    try:
        if args.action == "add":
            keys = TokenKeys(TokenSettings.from_env().secrets)
            types = None if args.events is None else [t for t in args.events.split(",") if t]
            endpoint, secret = await webhooks.add(
                conn, keys, args.url, types, args.description,
                allow_private=settings.allow_private,
            )  # fmt: skip
            # The id, then the secret, alone on stdout for scripts.
            print(endpoint.id)
            print(secret)
            print(
                f"registered webhook endpoint {endpoint.id} for "
                f"{', '.join(endpoint.event_types or ['every event'])}; the secret is shown "
                "only now",
                file=sys.stderr,
            )
            return 0
        if args.action == "list":
            found = await webhooks.listing(conn)
            _print_endpoints(found, args.json)
            return 0
        try:
            endpoint_id = uuid.UUID(args.id)
        except ValueError:
            raise UsageError(
                f"{args.id!r} is not an endpoint id (see `notifier webhooks list`)"
            ) from None
        if args.action == "remove":
            await webhooks.remove(conn, endpoint_id)
            print(f"webhook endpoint {endpoint_id} removed, with its deliveries")
        elif args.action == "rotate":
            keys = TokenKeys(TokenSettings.from_env().secrets)
            secret, until = await webhooks.rotate(
                conn, keys, endpoint_id, settings.rotation_overlap
            )
            print(secret)
            print(
                f"the old secret signs beside it until {until:%Y-%m-%d %H:%M:%S %Z}",
                file=sys.stderr,
            )
        else:
            await webhooks.enable(conn, endpoint_id)
            print(f"webhook endpoint {endpoint_id} enabled; its waiting deliveries go out now")
        return 0
    finally:
        await conn.close()


def _print_endpoints(found: list[Any], as_json: bool) -> None:
    if as_json:
        import dataclasses

        import orjson

        rows = [dataclasses.asdict(e) for e in found]
        print(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    for e in found:
        if e.disabled_at is not None:
            health = f"disabled: {e.disabled_reason}"
        elif e.failing_since is not None:
            health = f"failing since {e.failing_since:%Y-%m-%d %H:%M}"
        else:
            health = "healthy"
        types = ",".join(e.event_types or ["*"])
        print(f"{e.id}\t{e.url}\t{types}\t{health}\t{e.pending} waiting\t{e.dead} dead")
    if not found:
        print("no webhook endpoints: add one with `notifier webhooks add URL`")


def cmd_webhooks(args: argparse.Namespace) -> int:
    with _database(DatabaseSettings.from_env()) as url:
        return anyio.run(_webhooks, url, args, backend="asyncio")


def cmd_keys(args: argparse.Namespace) -> int:
    from notifier import apikeys

    if args.action == "generate":
        print(apikeys.generate().key)
        return 0
    if args.action == "return-secret":
        from notifier.return_urls import return_secrets
        from notifier.tokens import TokenKeys

        keys = TokenKeys(TokenSettings.from_env().secrets)
        for key_id, secret in return_secrets(keys, args.id):
            print(f"{key_id} {secret}")
        return 0
    with _database(DatabaseSettings.from_env()) as url:
        return anyio.run(_keys, url, args, backend="asyncio")


async def _grants(url: str, role: str) -> int:
    from notifier.storage.queries import sql

    conn = await connect(url)
    try:
        if not await conn.fetchval(sql("role_exists"), role):
            raise UsageError(f"no role named {role!r}: create it first (CREATE ROLE ... LOGIN)")
        await conn.execute(sql("grant_runtime"), role)
    finally:
        await conn.close()
    print(f"granted {role} what api, worker, stats and cleanup need")
    return 0


def cmd_grants(args: argparse.Namespace) -> int:
    with _database(DatabaseSettings.from_env()) as url:
        return anyio.run(_grants, url, args.role, backend="asyncio")


# The settings each command reads, for its --help (from the declarations, never copied).
_READS: dict[str, tuple[type, ...]] = {
    "migrate": (DatabaseSettings,),
    "worker": (
        DatabaseSettings,
        WorkerSettings,
        SmtpSettings,
        TokenSettings,
        MessageSettings,
        RetentionSettings,
        RequestSettings,
        CodeSettings,
        WebhookSettings,
    ),
    "api": (
        DatabaseSettings,
        ApiSettings,
        TokenSettings,
        RequestSettings,
        CodeSettings,
        SmtpSettings,
        WebhookSettings,
        InboundSettings,
    ),
    "dev": (
        DatabaseSettings,
        ApiSettings,
        TokenSettings,
        RequestSettings,
        CodeSettings,
        WorkerSettings,
        MessageSettings,
        InboundSettings,
    ),
    "inbound": (DatabaseSettings, SmtpSettings, InboundSettings, TokenSettings, WorkerSettings),
    "stats": (DatabaseSettings, Thresholds),
    "cleanup": (DatabaseSettings, RetentionSettings, RequestSettings, CodeSettings),
    "suppressions": (DatabaseSettings, RequestSettings),
    "keys": (DatabaseSettings, TokenSettings),
    "webhooks": (DatabaseSettings, TokenSettings, WebhookSettings),
    "grants": (DatabaseSettings,),
}


def _command(commands: Any, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does and every setting it reads."""
    reads = _READS[name] + (LogSettings,)
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog="settings it reads (environment variables):\n" + describe_settings(reads),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_verbose(parser)
    return parser


def _action(actions: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """An action of a command (`keys list`, `webhooks add`): it takes -v as its command does."""
    parser: argparse.ArgumentParser = actions.add_parser(name, **kwargs)
    _add_verbose(parser)
    return parser


def _add_verbose(parser: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    # Taken after the command too (`notifier migrate -v`, where a newcomer puts it); there it
    # has no default, so leaving it out never undoes a -v given before the command.
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="log everything down to debug detail (a command other than a service logs only "
        "warnings and errors otherwise)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="notifier", description="Email-verification delivery over a PostgreSQL outbox."
    )
    parser.add_argument("-V", "--version", action="version", version=f"notifier {__version__}")
    _add_verbose(parser, default=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_service_commands(commands)
    _add_operator_commands(commands)
    return parser


def _add_service_commands(commands: Any) -> None:
    migrate = _command(
        commands,
        "migrate",
        "apply pending schema migrations",
        "Apply the SQL migrations in schema/ that the database lacks, in order, each in its "
        "own transaction, under an advisory lock (any number may run at once). Forward-only: "
        "an applied migration whose file changed is refused.",
    )
    migrate.add_argument(
        "--status",
        action="store_true",
        help="list migrations and exit 1 if any is pending, applying nothing",
    )
    migrate.set_defaults(handler=cmd_migrate)

    worker = _command(
        commands,
        "worker",
        "deliver verification emails until SIGTERM",
        "Claim deliveries as notifications (or the sweep) find them, send them over SMTP and "
        "settle them, until SIGTERM or SIGINT: sends in flight get the shutdown grace, the "
        "rest are handed back. A second signal exits at once.",
    )
    worker.set_defaults(handler=cmd_worker)

    inbound = _command(
        commands,
        "inbound",
        "take bounce and complaint reports for NOTIFIER_BOUNCE_DOMAIN",
        "Listen for SMTP on NOTIFIER_INBOUND_HOST/PORT and take the reports mail systems send "
        "back to deliveries' return paths (bounce+<id>.<MAC>@NOTIFIER_BOUNCE_DOMAIN): delivery "
        "status notifications (RFC 3464) and feedback reports (ARF). A permanent bounce marks "
        "its delivery bounced and suppresses the address when the recipient's mailbox caused "
        "it; a complaint suppresses it until cleared. Mail to any other address is refused.",
    )
    inbound.set_defaults(handler=cmd_inbound)

    api = _command(
        commands,
        "api",
        "serve the internal API and the public link pages",
        "Serve the internal API (keys required) on NOTIFIER_API_HOST/PORT and the public link "
        "pages on NOTIFIER_PUBLIC_HOST/PORT, until SIGTERM or SIGINT.",
    )
    api.set_defaults(handler=cmd_api)

    dev = _command(
        commands,
        "dev",
        "everything in one process: embedded database, API, worker, dev inbox",
        "An embedded PostgreSQL (unless NOTIFIER_DATABASE_URL is set), a mail server that "
        "keeps what it gets in a web inbox, both HTTP listeners and a worker, on loopback. Its "
        "token secret, API key and inbox live in NOTIFIER_DATA_DIR.",
    )
    dev.add_argument(
        "--allow-remote",
        action="store_true",
        help="bind non-loopback addresses (NOTIFIER_API_HOST/NOTIFIER_PUBLIC_HOST) too: the "
        "inbox then shows every live link to whoever can reach it",
    )
    dev.set_defaults(handler=cmd_dev)


def _add_operator_commands(commands: Any) -> None:
    stats = _command(
        commands,
        "stats",
        "queue health; exits 1 when an alert threshold is crossed",
        "The queue's health and recent outcomes from the database, as tables or JSON; exits "
        "1 when a threshold is crossed, so it can serve as an alert probe.",
    )
    stats.add_argument("--json", action="store_true", help="print JSON instead of tables")
    stats.add_argument(
        "--window", type=float, default=3600.0, help="seconds of history to summarise (3600)"
    )
    stats.set_defaults(handler=cmd_stats)

    cleanup = _command(
        commands,
        "cleanup",
        "scrub and delete finished deliveries, expire suppressions",
        "Scrub, then delete, finished deliveries by age; delete expired suppressions and "
        "spent budget counters; in bounded batches, one process at a time.",
    )
    cleanup.set_defaults(handler=cmd_cleanup)

    suppressions = _command(
        commands,
        "suppressions",
        "list suppressed mailboxes, or clear one",
        "Mailboxes the recipient's server refused for good (unknown, disabled, full) get no "
        "mail until their suppression expires or is cleared; any spelling clears a mailbox.",
    )
    suppressions.add_argument("action", choices=["list", "clear"])
    suppressions.add_argument("address", nargs="?", help="the address to clear")
    suppressions.set_defaults(handler=cmd_suppressions)
    _add_keys(commands)
    _add_webhooks(commands)

    grants = _command(
        commands,
        "grants",
        "give an existing database role what api, worker, stats and cleanup need",
        "Least privilege: run migrations as the schema's owner, and everything else as a role "
        "this command grants (run it as the owner, after `notifier migrate`).",
    )
    grants.add_argument("role", help="the runtime role, e.g. notifier_runtime")
    grants.set_defaults(handler=cmd_grants)


def _add_keys(commands: Any) -> None:
    keys = _command(
        commands,
        "keys",
        "API keys for the internal API: create (shown once), list, revoke, generate",
        "API keys for the internal API. The database keeps only a hash of each.",
    )
    key_actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = _action(
        key_actions,
        "create",
        help="create a key and print it (once)",
        description="Create an API key and print it on stdout; only its hash is kept.",
    )
    create.add_argument("name", help="who the key is for (e.g. the app's name)")
    create.add_argument(
        "--scope",
        action="append",
        metavar="SCOPE",
        help="request, read, admin or metrics; repeat or comma-separate (default: request)",
    )
    create.add_argument(
        "--key-from-env",
        metavar="VARIABLE",
        help="register the key held in this environment variable (made with `notifier keys "
        "generate`) instead of a new one; registering it again is a no-op (for deployments)",
    )
    create.add_argument(
        "--return-url",
        action="append",
        metavar="PREFIX",
        help="narrow where this key's verifications may send people back to after Confirm "
        "to these prefixes within NOTIFIER_RETURN_URLS (repeat for several)",
    )
    narrow = _action(
        key_actions,
        "return-urls",
        help="narrow (or, with no prefix, widen again) a key's return URLs",
        description="Where the verifications this key requests may send people back to: "
        "prefixes within NOTIFIER_RETURN_URLS; none: all of it.",
    )
    narrow.add_argument("id", help="the key's id")
    narrow.add_argument("prefix", nargs="*", help="URL prefixes, e.g. https://app.example.com/")
    secret = _action(
        key_actions,
        "return-secret",
        help="print what an app checks its return redirects' signatures with",
        description="For each NOTIFIER_TOKEN_SECRET (newest first): its key id and the "
        "base64url secret the redirects after Confirm of this key's verifications are "
        "signed with (see the README's scheme; Python apps call notifier.check_return).",
    )
    secret.add_argument(
        "id", nargs="?", help="the key's id (none: verifications made with the library call)"
    )
    listing = _action(
        key_actions,
        "list",
        help="every key: id, name, scopes, use, state",
        description="Every API key.",
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    revoke = _action(
        key_actions,
        "revoke",
        help="revoke a key; requests with it fail within a second",
        description="Revoke a key: requests and sessions with it fail within a second.",
    )
    revoke.add_argument("id", help="the key's id (the 12 hex digits after nfk_)")
    _action(
        key_actions,
        "generate",
        help="print a new key without storing it (for a deployment's secret)",
        description="Print a new key without storing it; register it with "
        "`keys create NAME --key-from-env VARIABLE`.",
    )
    keys.set_defaults(handler=cmd_keys)


def _add_webhooks(commands: Any) -> None:
    hooks = _command(
        commands,
        "webhooks",
        "the app's webhook endpoints: add (secret shown once), list, remove, rotate, enable",
        "Endpoints that receive events (Standard Webhooks v1, signed). Each gets its own "
        "secret, derived from NOTIFIER_TOKEN_SECRET and never stored.",
    )
    actions = hooks.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = _action(
        actions,
        "add",
        help="register an endpoint; prints its id and secret (once)",
        description="Register an https endpoint (every address it resolves to must be public "
        "unless NOTIFIER_WEBHOOK_ALLOW_PRIVATE); prints its id, then its whsec_ secret.",
    )
    add.add_argument("url")
    add.add_argument(
        "--events", metavar="TYPE,...", help="only these event types (default: every type)"
    )
    add.add_argument("--description", help="who it is for")
    listing = _action(actions, "list", help="every endpoint and its health")
    listing.add_argument("--json", action="store_true", help="print JSON")
    for name, summary in (
        ("remove", "remove an endpoint, with its deliveries"),
        ("rotate", "a new secret (printed once); the old one signs beside it for a while"),
        ("enable", "enable a disabled endpoint; its waiting deliveries go out"),
    ):
        action = _action(
            actions, name, help=summary, description=summary[0].upper() + summary[1:] + "."
        )
        action.add_argument("id", help="the endpoint's id")
    hooks.set_defaults(handler=cmd_webhooks)


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    # Dev mode is read by a person; everything else by a log pipeline.
    try:
        fmt = LogSettings.from_env().format or ("text" if args.command == "dev" else "json")
    except NotifierError as exc:
        print(f"notifier: error: {exc}", file=sys.stderr)
        sys.exit(2)
    configure_logging(fmt, log_level(args.command, args.verbose))
    try:
        code = args.handler(args)
    except NotifierError as exc:
        print(f"notifier: error: {exc}", file=sys.stderr)
        code = 2
    except PERMISSION_DENIED as exc:
        print(
            f"notifier: error: the database refused: {exc}. This command needs the role that "
            "owns the notifier schema (migrate, keys, grants), not the runtime role.",
            file=sys.stderr,
        )
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
