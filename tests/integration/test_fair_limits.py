"""Limits and suppressions that one party cannot turn against another's users: each case an
attack on an earlier release reproduced, and what it does now."""

from __future__ import annotations

import uuid

import anyio
import asyncpg
import httpx
import pytest

from notifier import events
from notifier.tokens import TokenKeys
from tests.support.apps import Clients, bearer, make_key
from tests.support.deliveries import enqueue
from tests.support.recorder import Recorder
from tests.support.smtp_server import Fault, SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 15


async def ask(
    client: httpx.AsyncClient, email: str, user: str | None = None, **headers: str
) -> httpx.Response:
    return await client.post(
        "/v1/verifications",
        json={"user_id": user or f"u-{uuid.uuid4()}", "email": email},
        headers={"Idempotency-Key": str(uuid.uuid4()), **headers},
    )


async def refuse_once(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp: SmtpServer, email: str
) -> None:
    """One delivery to `email`, which the server refuses as an unknown user (550 5.1.1)."""
    smtp.plan(email, Fault.RCPT_5XX)
    recorder = Recorder()
    async with running_worker(database_url, keys, smtp.settings(), recorder=recorder):
        await enqueue(db, keys, email)
        with anyio.fail_after(WAIT):
            await recorder.wait_for_kind(events.Completed)


# -- a suppression is for the address that was refused ----------------------------------------


async def test_a_refused_tag_does_not_suppress_the_mailbox_without_it(
    apps: Clients,
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
) -> None:
    # A server that knows no sub-addressing refuses the tag; Alice herself is fine.
    await refuse_once(db, database_url, keys, smtp_server, "alice+x@corp.example")
    assert (await ask(apps.internal, "alice@corp.example")).status_code == 202


async def test_the_refused_address_itself_is_suppressed_whatever_its_case(
    apps: Clients,
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
) -> None:
    await refuse_once(db, database_url, keys, smtp_server, "alice+x@corp.example")
    refused = await ask(apps.internal, "Alice+X@Corp.example")
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "email_suppressed"


# -- the per-domain budget is no outage switch --------------------------------------------------


@pytest.mark.parametrize("policy_overrides", [{"domain_limit": 3}])
async def test_one_clients_requests_to_a_domain_never_refuse_another_clients_users(
    apps: Clients, db: asyncpg.Connection
) -> None:
    bot, app = bearer(await make_key(db, ["request"])), bearer(await make_key(db, ["request"]))
    for n in range(3):
        assert (await ask(apps.internal, f"staff{n}@corp.example", **bot)).status_code == 202
    refused = await ask(apps.internal, "staff9@corp.example", **bot)
    assert refused.status_code == 429 and "domain limit" in refused.json()["error"]["message"]
    assert (await ask(apps.internal, "real.person@corp.example", **app)).status_code == 202


@pytest.mark.parametrize("policy_overrides", [{"domain_limit": 3}])
@pytest.mark.parametrize("domain", ["gmail.com", "outlook.com", "yahoo.com"])
async def test_a_shared_providers_domain_has_no_domain_budget(
    apps: Clients, db: asyncpg.Connection, domain: str
) -> None:
    # A bot signing up distinct addresses at a shared provider through an app's own form:
    # each is a different person, and the app's real users there must still get through.
    for n in range(4):
        assert (await ask(apps.internal, f"bot{n}.person@{domain}")).status_code == 202
    assert (await ask(apps.internal, f"real.person@{domain}")).status_code == 202


# -- the mailbox limit knows the providers' own rules -------------------------------------------


@pytest.mark.parametrize("policy_overrides", [{"resend_limit": 5}])
@pytest.mark.parametrize(
    "spelling", ["a.dalovelace@googlemail.com", "ada.love.lace@gmail.com", "AdaLovelace@gmail.com"]
)
async def test_gmails_dotted_spellings_and_googlemail_share_one_mailbox_budget(
    apps: Clients, db: asyncpg.Connection, spelling: str
) -> None:
    for _ in range(5):
        assert (await ask(apps.internal, "adalovelace@googlemail.com")).status_code == 202
    refused = await ask(apps.internal, spelling)
    assert refused.status_code == 429 and "mailbox limit" in refused.json()["error"]["message"]


async def test_a_gmail_address_goes_out_as_typed_though_its_mailbox_drops_the_dots(
    apps: Clients, db: asyncpg.Connection
) -> None:
    assert (await ask(apps.internal, "Ada.Lovelace@googlemail.com")).status_code == 202
    row = await db.fetchrow("SELECT email, mailbox FROM notifier.verifications")
    assert (row["email"], row["mailbox"]) == (
        "Ada.Lovelace@googlemail.com",
        "adalovelace@gmail.com",
    )


@pytest.mark.parametrize("policy_overrides", [{"resend_limit": 1}])
async def test_dots_still_count_apart_at_a_provider_that_reads_them(
    apps: Clients, db: asyncpg.Connection
) -> None:
    assert (await ask(apps.internal, "ada.lovelace@outlook.com")).status_code == 202
    assert (await ask(apps.internal, "adalovelace@outlook.com")).status_code == 202


# -- each client's users are its own ------------------------------------------------------------


async def test_another_clients_request_for_the_same_user_leaves_this_clients_link_live(
    apps: Clients, db: asyncpg.Connection
) -> None:
    a, b = bearer(await make_key(db, ["request"])), bearer(await make_key(db, ["request"]))
    first = await ask(apps.internal, "ada@example.com", user="42", **a)
    assert (await ask(apps.internal, "ada@example.com", user="42", **b)).status_code == 202
    superseded = await db.fetchval(
        "SELECT superseded_at FROM notifier.verifications WHERE id = $1",
        uuid.UUID(first.json()["id"]),
    )
    assert superseded is None


async def test_a_new_request_from_the_same_client_still_supersedes_its_earlier_link(
    apps: Clients, db: asyncpg.Connection
) -> None:
    a = bearer(await make_key(db, ["request"]))
    first = await ask(apps.internal, "ada@example.com", user="42", **a)
    second = await ask(apps.internal, "ada@example.com", user="42", **a)
    row = await db.fetchrow(
        "SELECT superseded_at, superseded_by FROM notifier.verifications WHERE id = $1",
        uuid.UUID(first.json()["id"]),
    )
    assert row["superseded_at"] is not None
    assert row["superseded_by"] == uuid.UUID(second.json()["id"])


@pytest.mark.parametrize("policy_overrides", [{"resend_limit": 5}])
async def test_another_clients_requests_for_a_user_id_leave_this_clients_user_budget_alone(
    apps: Clients, db: asyncpg.Connection
) -> None:
    a, b = bearer(await make_key(db, ["request"])), bearer(await make_key(db, ["request"]))
    for n in range(5):
        assert (await ask(apps.internal, f"b{n}@example.com", user="42", **b)).status_code == 202
    assert (await ask(apps.internal, "b9@example.com", user="42", **b)).status_code == 429
    assert (await ask(apps.internal, "ada@example.com", user="42", **a)).status_code == 202
