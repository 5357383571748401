"""The `notifier` command: one subcommand per job, each a thin shell over the package."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import anyio

from notifier import migrations
from notifier.config import DatabaseSettings
from notifier.database import ONE_SHOT_CACHE, connect, database_url
from notifier.errors import NotifierError, UsageError
from notifier.logs import configure_logging

log = logging.getLogger("notifier")


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
    settings = DatabaseSettings.from_env()
    with database_url(settings) as url:
        return anyio.run(_migrate, settings.listen_url_for(url), args.status, backend="asyncio")


def cmd_worker(args: argparse.Namespace) -> int:
    from notifier.runner import WorkerConfig, run_worker

    config = WorkerConfig.from_env()  # invalid settings stop here, before any connection
    with database_url(config.database) as url:
        anyio.run(run_worker, url, config, backend="asyncio")
    return 0


def cmd_api(args: argparse.Namespace) -> int:
    from notifier.config import ApiSettings
    from notifier.runner import run_api
    from notifier.verifications import Policy

    policy, settings = Policy.from_env(), ApiSettings.from_env()
    database = DatabaseSettings.from_env()
    with database_url(database) as url:
        anyio.run(run_api, url, policy, settings, database, backend="asyncio")
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from notifier.dev import run_dev

    settings = DatabaseSettings.from_env()
    with database_url(settings) as url:
        shown = "NOTIFIER_DATABASE_URL" if settings.url else f"embedded in {settings.data_dir}/"
        anyio.run(run_dev, url, shown, backend="asyncio")
    return 0


async def _suppressions(url: str, clear: str | None) -> int:
    from notifier.queries import sql
    from notifier.verifications import normalize_email

    conn = await connect(url, statement_cache_size=ONE_SHOT_CACHE)
    try:
        if clear is not None:
            address = normalize_email(clear)
            if await conn.fetchval(sql("clear_suppression"), address) is None:
                print(f"{address} was not suppressed")
                return 1
            print(f"cleared {address}: requests for it are accepted again")
            return 0
        rows = await conn.fetch(sql("suppressions"))
        for row in rows:
            print(f"{row['email']}\t{row['suppressed_at']:%Y-%m-%d %H:%M}\t{row['reason']}")
        if not rows:
            print("no suppressed addresses")
        return 0
    finally:
        await conn.close()


def cmd_suppressions(args: argparse.Namespace) -> int:
    if args.action == "clear" and not args.address:
        raise UsageError("suppressions clear needs the ADDRESS to clear")
    clear = args.address if args.action == "clear" else None
    with database_url(DatabaseSettings.from_env()) as url:
        return anyio.run(_suppressions, url, clear, backend="asyncio")


async def _stats(url: str, args: argparse.Namespace) -> int:
    import orjson
    from rich.console import Console

    from notifier.config import Thresholds
    from notifier.stats import collect, render

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
    with database_url(DatabaseSettings.from_env()) as url:
        return anyio.run(_stats, url, args, backend="asyncio")


async def _cleanup(url: str) -> int:
    from notifier.config import RetentionSettings
    from notifier.database import create_pool
    from notifier.maintenance import cleanup

    settings = RetentionSettings.from_env()
    pool = await create_pool(url, max_size=1, statement_cache_size=ONE_SHOT_CACHE)
    try:
        report = await cleanup(pool, settings)
    finally:
        await pool.close()
    if report.skipped:
        print("another process is cleaning up; nothing done")
        return 0
    print(f"scrubbed {report.scrubbed} addresses, deleted {report.deleted} finished deliveries")
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    with database_url(DatabaseSettings.from_env()) as url:
        return anyio.run(_cleanup, url, backend="asyncio")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="notifier", description="Email-verification delivery over a PostgreSQL outbox."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    migrate = commands.add_parser("migrate", help="apply pending schema migrations")
    migrate.add_argument(
        "--status",
        action="store_true",
        help="list migrations and exit 1 if any is pending, applying nothing",
    )
    migrate.set_defaults(handler=cmd_migrate)

    worker = commands.add_parser(
        "worker", help="deliver verification emails until SIGTERM (settings: NOTIFIER_*)"
    )
    worker.set_defaults(handler=cmd_worker)

    api = commands.add_parser("api", help="serve the HTTP API (NOTIFIER_API_HOST/PORT)")
    api.set_defaults(handler=cmd_api)

    dev = commands.add_parser(
        "dev", help="everything in one process: embedded database, API, worker, dev inbox"
    )
    dev.set_defaults(handler=cmd_dev)

    stats = commands.add_parser(
        "stats", help="queue health from the database; exits 1 when an alert threshold is crossed"
    )
    stats.add_argument("--json", action="store_true", help="print JSON instead of tables")
    stats.add_argument(
        "--window", type=float, default=3600.0, help="seconds of history to summarise (3600)"
    )
    stats.set_defaults(handler=cmd_stats)

    cleanup = commands.add_parser(
        "cleanup",
        help="scrub and delete finished deliveries (NOTIFIER_SCRUB_AFTER, NOTIFIER_RETENTION)",
    )
    cleanup.set_defaults(handler=cmd_cleanup)

    suppressions = commands.add_parser(
        "suppressions", help="list addresses suppressed after a permanent failure, or clear one"
    )
    suppressions.add_argument("action", choices=["list", "clear"])
    suppressions.add_argument("address", nargs="?", help="the address to clear")
    suppressions.set_defaults(handler=cmd_suppressions)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    # Dev mode is read by a person; everything else by a log pipeline.
    fmt = os.environ.get("NOTIFIER_LOG_FORMAT", "text" if args.command == "dev" else "json")
    configure_logging(
        "text" if fmt.strip().lower() == "text" else "json",
        logging.DEBUG if args.verbose else logging.INFO,
    )
    try:
        code = args.handler(args)
    except NotifierError as exc:
        print(f"notifier: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
