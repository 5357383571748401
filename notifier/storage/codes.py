"""Confirming a verification by its code: the app's call, on any driver, and what its answer
means.

The code typed into the app is normalised and hashed here under every configured secret;
the database judges it and counts it in one statement (schema confirm_code_v1), under the
verification's row lock and its mailbox's lock: two concurrent guesses never share one
count, and a right code confirms exactly once. The code itself never reaches the database,
a log or a span.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from notifier import codes
from notifier.errors import NotifierError
from notifier.storage.connection import Runner
from notifier.storage.drivers import (
    AsyncRunner,
    CatalogueRunner,
    SyncRunner,
    async_runner,
    sync_runner,
)
from notifier.storage.outbox import env_policy
from notifier.storage.queries import arguments, sql
from notifier.verifications import BUDGET_SLICES, CodeCheck, NoCode, Policy


class UnknownVerification(NotifierError):
    """No verification has that id (or, through the API, none the calling key may confirm)."""

    code = "not_found"

    def __init__(self) -> None:
        super().__init__("no verification has that id")


class InTransaction(NotifierError):
    """confirm_code was called inside the caller's transaction: a rollback would undo the
    count of a wrong code and give whoever guesses fresh attempts; nothing was judged."""

    def __init__(self) -> None:
        super().__init__(
            "confirm_code must run outside a transaction, so that a wrong code stays counted "
            "whatever the caller's transaction does (a rollback would hand out fresh "
            "guesses): asyncpg: outside `conn.transaction()`; psycopg: autocommit=True; "
            "SQLAlchemy: isolation_level='AUTOCOMMIT'; Django: outside transaction.atomic() "
            "(with ATOMIC_REQUESTS, mark the view non_atomic_requests). Nothing was judged."
        )


# The one statement every driver runs (schema confirm_code_v1).
STATEMENT = "confirm_code"


def _values(
    policy: Policy, verification_id: uuid.UUID, typed: str, client_id: str | None
) -> list[object]:
    code = codes.normalize(typed)
    hashes = policy.keys.code_hashes(verification_id, code)
    limits = policy.codes
    return arguments(
        STATEMENT,
        {
            "p_id": str(verification_id),
            "p_client_id": client_id,
            "p_key_ids": [kid for kid, _ in hashes],
            "p_code_hashes": [digest for _, digest in hashes],
            "p_max_failures": limits.max_failures,
            "p_mailbox_failures": limits.mailbox_failures,
            "p_window": limits.failure_window,
            "p_slice": limits.failure_window / BUDGET_SLICES,
        },
    )


def _answer(verification_id: uuid.UUID, row: Mapping[str, Any]) -> CodeCheck:
    match row["result"]:
        case "not_found":
            raise UnknownVerification()
        case "no_code":
            raise NoCode()
        case outcome:
            return CodeCheck(
                outcome=outcome,
                verification_id=verification_id,
                attempts_remaining=row["attempts_remaining"],
                superseded_by=None
                if row["superseded_by"] is None
                else uuid.UUID(str(row["superseded_by"])),
                locked_by=row["locked_by"],
                retry_after=row["retry_after"],
            )


async def check(
    runner: AsyncRunner,
    verification_id: uuid.UUID,
    typed: str,
    *,
    policy: Policy,
    client_id: str | None = None,
) -> CodeCheck:
    """Judge `typed` for `verification_id` on `runner` (no transaction check: the package's
    own callers commit each statement by itself)."""
    row = await runner.fetch_one(sql(STATEMENT), _values(policy, verification_id, typed, client_id))
    return _answer(verification_id, row)


async def check_standalone(
    conn: Runner,
    verification_id: uuid.UUID,
    typed: str,
    *,
    policy: Policy,
    client_id: str | None,
) -> CodeCheck:
    """`check` on one of the package's own connections (the internal API): only the codes
    of verifications `client_id` requested (or requested an earlier one of, in a resend
    chain) are judged; any other id is UnknownVerification."""
    return await check(
        CatalogueRunner(conn), verification_id, typed, policy=policy, client_id=client_id
    )


async def confirm_code(
    conn: object, verification_id: uuid.UUID, code: str, *, policy: Policy | None = None
) -> CodeCheck:
    """Confirm verification `verification_id` with the `code` the person typed into the app,
    on `conn` (an asyncpg Connection, a psycopg AsyncConnection, a SQLAlchemy
    AsyncConnection), outside any transaction (else InTransaction, nothing judged).

    The answer's `outcome`: verified (now; the verification.confirmed event is written),
    already_verified, expired (`superseded_by` names what replaced it, when something did),
    locked (`locked_by`: its own wrong codes, or its mailbox's over the failure window), or
    wrong (with `attempts_remaining`): every wrong code alike, whatever was wrong with it.
    Spaces and dashes in `code` are ignored. UnknownVerification for an unknown id, NoCode
    for a link-only verification. `policy` defaults to one read from the environment.
    """
    runner = async_runner(conn)
    if await runner.in_transaction():
        raise InTransaction()
    return await check(runner, verification_id, code, policy=policy or env_policy())


def confirm_code_sync(
    conn: object, verification_id: uuid.UUID, code: str, *, policy: Policy | None = None
) -> CodeCheck:
    """`confirm_code` on a sync connection (a psycopg Connection, a SQLAlchemy Connection):
    the same arguments, answer and errors."""
    return check_sync_outside_transaction(sync_runner(conn), verification_id, code, policy)


def check_sync_outside_transaction(
    runner: SyncRunner, verification_id: uuid.UUID, code: str, policy: Policy | None = None
) -> CodeCheck:
    """`confirm_code_sync` on any sync runner (Django's too): InTransaction inside one."""
    if runner.in_transaction():
        raise InTransaction()
    values = _values(policy or env_policy(), verification_id, code, None)
    return _answer(verification_id, runner.fetch_one(sql(STATEMENT), values))
