"""The `notifier` command: one subcommand per job, each a thin shell over the package."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import anyio

from notifier import migrations
from notifier.config import DatabaseSettings
from notifier.database import connect, database_url
from notifier.errors import NotifierError

log = logging.getLogger("notifier")


async def _migrate(url: str, show_status: bool) -> int:
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
    with database_url(DatabaseSettings.from_env()) as url:
        return anyio.run(_migrate, url, args.status, backend="asyncio")


def cmd_worker(args: argparse.Namespace) -> int:
    from notifier.runner import WorkerConfig, run_worker

    config = WorkerConfig.from_env()  # invalid settings stop here, before any connection
    with database_url(DatabaseSettings.from_env()) as url:
        anyio.run(run_worker, url, config, backend="asyncio")
    return 0


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
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        code = args.handler(args)
    except NotifierError as exc:
        print(f"notifier: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
