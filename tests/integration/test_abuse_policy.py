"""What an attacker or an operator broke before, each finding pinned by the test that
reproduced it: throttle bypass by spelling, suppression of innocent recipients, resends of
scrubbed addresses, rotation that did not revoke, guessable fingerprints, addresses, and
codes guessed across resends."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import uuid
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import orjson
import pytest

from notifier import events
from notifier.config import CodeSettings, RetentionSettings
from notifier.storage.maintenance import cleanup
from notifier.storage.outbox import request_verification
from notifier.tokens import TokenKeys
from notifier.verifications import Throttled
from tests.conftest import TEST_SECRET
from tests.support.apps import Clients, bearer, make_key, serve
from tests.support.deliveries import (
    code_of,
    enqueue,
    expire_verification,
    link_token,
    outbox_row,
    policy_for_tests,
)
from tests.support.recorder import Recorder
from tests.support.smtp_server import Fault, Reply, SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 15
DAY = 86400.0
NEW_SECRET = "Hs8Xq2Vb5Nc1Ld7Ke3Mf9Pg4Rj6Tw0Ya2Uz8Bn5Cv"


async def ask(
    client: httpx.AsyncClient, email: str, user: str | None = None, **headers: str
) -> httpx.Response:
    return await client.post(
        "/v1/verifications",
        json={"user_id": user or f"u-{uuid.uuid4()}", "email": email},
        headers={"Idempotency-Key": str(uuid.uuid4()), **headers},
    )


# -- 1. every limit counts the canonical mailbox ---------------------------------------------


@pytest.mark.parametrize("policy_overrides", [{"resend_limit": 1}])
@pytest.mark.parametrize(
    "variant", ["Victim@example.com", "vIctim@EXAMPLE.com", "victim+1@example.com"]
)
async def test_spellings_and_tags_of_one_mailbox_share_one_budget(
    apps: Clients, db: asyncpg.Connection, variant: str
) -> None:
    assert (await ask(apps.internal, "victim@EXAMPLE.com")).status_code == 202
    refused = await ask(apps.internal, variant)
    assert refused.status_code == 429, refused.text
    assert "mailbox limit" in refused.json()["error"]["message"]
    assert 0 < int(refused.headers["Retry-After"]) <= 3600
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 1


@pytest.mark.parametrize("policy_overrides", [{"resend_limit": 1}])
async def test_mail_still_goes_to_the_address_as_typed(
    apps: Clients, db: asyncpg.Connection
) -> None:
    assert (await ask(apps.internal, "Ada+News@Example.com")).status_code == 202
    row = await db.fetchrow("SELECT email, mailbox FROM notifier.verifications")
    assert (row["email"], row["mailbox"]) == ("Ada+News@example.com", "ada@example.com")


@pytest.mark.parametrize("policy_overrides", [{"domain_limit": 2}])
async def test_a_domain_has_its_own_budget(apps: Clients) -> None:
    for n in range(2):
        assert (await ask(apps.internal, f"p{n}@noisy.example")).status_code == 202
    refused = await ask(apps.internal, "p9@noisy.example")
    assert refused.status_code == 429 and "domain limit" in refused.json()["error"]["message"]
    assert (await ask(apps.internal, "p9@quiet.example")).status_code == 202


@pytest.mark.parametrize("policy_overrides", [{"client_limit": 2}])
async def test_each_client_has_its_own_budget(apps: Clients, db: asyncpg.Connection) -> None:
    first, second = bearer(await make_key(db, ["request"])), bearer(await make_key(db, ["request"]))
    for n in range(2):
        assert (await ask(apps.internal, f"c{n}@example.com", **first)).status_code == 202
    refused = await ask(apps.internal, "c9@example.com", **first)
    assert refused.status_code == 429 and "client limit" in refused.json()["error"]["message"]
    assert (await ask(apps.internal, "c9@example.com", **second)).status_code == 202


@pytest.mark.parametrize("policy_overrides", [{"global_limit": 3}])
async def test_there_is_a_ceiling_on_everything(apps: Clients, db: asyncpg.Connection) -> None:
    for n in range(3):
        assert (await ask(apps.internal, f"g{n}@d{n}.example")).status_code == 202
    refused = await ask(apps.internal, "g9@d9.example")
    assert refused.status_code == 429 and "global limit" in refused.json()["error"]["message"]
    # The library call counts against the same ceiling.
    with pytest.raises(Throttled, match="global limit"):
        async with db.transaction():
            await request_verification(
                db,
                user_id="lib",
                email="lib@lib.example",
                policy=policy_for_tests(TokenKeys((TEST_SECRET,)), global_limit=3),
            )


async def test_requests_counting_against_one_budget_at_once_never_wait_for_each_other(
    pool: asyncpg.Pool,
) -> None:
    policy = policy_for_tests(TokenKeys((TEST_SECRET,)), domain_limit=6, global_limit=6)
    async with contextlib.AsyncExitStack() as open_transactions:
        # Six transactions, each still holding what its request wrote: more than any fixed
        # number of counter rows a design might spread them over.
        for n in range(6):
            conn = await open_transactions.enter_async_context(pool.acquire())
            await open_transactions.enter_async_context(conn.transaction())
            await conn.execute("SET LOCAL lock_timeout = '2s'")  # a wait fails the test
            await request_verification(
                conn, user_id=f"busy{n}", email=f"busy{n}@busy.example", policy=policy
            )
    counted = await pool.fetchval(
        "SELECT sum(count) FROM notifier.request_counts WHERE scope = 'global'"
    )
    assert counted == 6
    with pytest.raises(Throttled, match="domain limit"):  # the rows still add up to one budget
        async with pool.acquire() as conn, conn.transaction():
            await request_verification(
                conn, user_id="late", email="late@busy.example", policy=policy
            )


@pytest.mark.parametrize("policy_overrides", [{"domain_limit": 1}])
async def test_budget_counters_hold_no_domain_in_the_clear(
    apps: Clients, db: asyncpg.Connection
) -> None:
    await ask(apps.internal, "x@secret-domain.example")
    dump = str([dict(r) for r in await db.fetch("SELECT * FROM notifier.request_counts")])
    assert "secret-domain" not in dump and b"secret-domain".hex() not in dump


# -- 2. only the recipient's own refusal suppresses it ----------------------------------------


async def deliver_one(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp: SmtpServer, email: str
) -> tuple[Any, Recorder]:
    recorder = Recorder()
    async with running_worker(database_url, keys, smtp.settings(), recorder=recorder):
        enqueued = await enqueue(db, keys, email)
        with anyio.fail_after(WAIT):
            await recorder.wait_for_kind(events.Completed)
    return await outbox_row(db, enqueued.outbox_id), recorder


async def suppressed(db: asyncpg.Connection) -> list[str]:
    return [r["email"] for r in await db.fetch("SELECT email FROM notifier.suppressed_addresses")]


@pytest.mark.parametrize(
    ("plan", "why"),
    [
        (Reply("mail", "550 5.7.1 sender address rejected"), "our sender refused"),
        (Reply("data", "554 5.6.0 message content rejected"), "our content refused"),
        (Reply("rcpt", "550 5.7.1 rejected by local policy"), "a policy refusal at RCPT"),
        (Reply("data", "554 transaction failed"), "a bare refusal after the body"),
        (Reply("data", "550 5.1.7 bad sender mailbox"), "our sender's address"),
    ],
)
async def test_a_refusal_that_is_ours_fails_the_delivery_alerts_and_suppresses_nobody(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    caplog: pytest.LogCaptureFixture,
    plan: Reply,
    why: str,
) -> None:
    if plan.at == "mail":
        smtp_server.plan_mail(plan)
    else:
        smtp_server.plan("innocent@example.com", plan)
    with caplog.at_level(logging.ERROR, logger="notifier.delivery.mailer"):
        row, recorder = await deliver_one(
            db, database_url, keys, smtp_server, "innocent@example.com"
        )
    assert row["status"] == "failed", why
    assert await suppressed(db) == [], why
    assert len(recorder.of(events.ConfigurationProblem)) == 1, why
    assert any("configuration problem" in r.getMessage() for r in caplog.records), why


@pytest.mark.parametrize(
    "plan",
    [
        Fault.RCPT_5XX,  # 550 5.1.1 user unknown, at RCPT
        Reply("rcpt", "550 no such user"),  # a bare 5xx at RCPT
        Reply("data", "552 5.2.2 mailbox full"),
        Reply("data", "550 5.2.1 mailbox disabled"),
    ],
)
async def test_the_recipients_own_refusal_suppresses_the_refused_address_for_a_while(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    plan: Fault | Reply,
) -> None:
    smtp_server.plan("Gone+tag@example.com", plan)
    row, recorder = await deliver_one(db, database_url, keys, smtp_server, "Gone+tag@example.com")
    assert row["status"] == "failed" and not recorder.of(events.ConfigurationProblem)
    entry = await db.fetchrow(
        "SELECT email, expires_at - suppressed_at AS lasts FROM notifier.suppressed_addresses"
    )
    # The address that was refused, lowercased: not its mailbox's other spellings.
    assert entry["email"] == "gone+tag@example.com"
    assert entry["lasts"].total_seconds() == pytest.approx(30 * DAY, abs=60)


async def test_an_expired_suppression_no_longer_refuses_and_retention_deletes_it(
    apps: Clients, db: asyncpg.Connection, pool: asyncpg.Pool
) -> None:
    await db.execute(
        """INSERT INTO notifier.suppressed_addresses (email, reason, expires_at)
           VALUES ('was@example.com', '550 5.1.1', now() - interval '1 second')"""
    )
    assert (await ask(apps.internal, "was@example.com")).status_code == 202
    listed = (await apps.internal.get("/v1/suppressions")).json()["suppressions"]
    assert listed == []
    report = await cleanup(pool, RetentionSettings(), 3600.0)
    assert report.suppressions_expired == 1 and await suppressed(db) == []


async def test_the_public_resend_never_says_an_address_is_suppressed(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = await enqueue(db, keys, "quiet@example.com")
    await expire_verification(db, created.outbox_id)
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason) VALUES ($1, 'x')",
        "quiet@example.com",
    )
    token = await link_token(db, keys, created.id)
    page = await apps.public.post("/verify/resend", data={"token": token})
    assert page.status_code == 429 and "suppress" not in page.text.lower()
    assert "Retry-After" not in page.headers


# -- 3. a resend after cleanup mails nobody ---------------------------------------------------


async def test_a_resend_from_a_scrubbed_link_says_start_again_and_sends_nothing(
    apps: Clients, db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys
) -> None:
    created = await enqueue(db, keys, "mallory@example.com")
    token = await link_token(db, keys, created.id)
    await db.execute(
        """UPDATE notifier.email_outbox SET status = 'sent', attempts = 1,
                  completed_at = now() - interval '8 days'"""
    )
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - interval '8 days'")
    assert (await cleanup(pool, RetentionSettings(), 3600.0)).scrubbed == 1
    page = await apps.public.post("/verify/resend", data={"token": token})
    assert page.status_code == 410 and "data-outcome=too_old" in page.text
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 1


async def test_a_resend_from_a_link_long_expired_says_start_again(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = await enqueue(db, keys, "late@example.com")
    token = await link_token(db, keys, created.id)
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - interval '8 days'")
    page = await apps.public.post("/verify/resend", data={"token": token})
    assert page.status_code == 410 and "data-outcome=too_old" in page.text
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 1


async def test_cleanup_scrubs_no_link_that_is_still_live(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys
) -> None:
    await enqueue(db, keys, "live@example.com")
    await db.execute(
        """UPDATE notifier.email_outbox SET status = 'sent', attempts = 1,
                  completed_at = now() - interval '8 days'"""
    )
    assert (await cleanup(pool, RetentionSettings(), 3600.0)).scrubbed == 0


# -- 4. removing a secret revokes its links ---------------------------------------------------


async def test_removing_a_secret_revokes_the_links_made_with_it(
    pool: asyncpg.Pool, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    created = await enqueue(db, keys, "rotated@example.com")
    token = await link_token(db, keys, created.id)
    rotated = policy_for_tests(TokenKeys((NEW_SECRET,)))
    async with serve(pool, rotated) as apps:
        confirmed = await apps.public.post("/v1/verifications/confirm", json={"token": token})
        page = await apps.public.get("/verify", params={"token": token})
    assert (confirmed.status_code, confirmed.json()["outcome"]) == (400, "invalid")
    assert page.status_code == 400
    assert await db.fetchval("SELECT verified_at FROM notifier.verifications") is None


async def test_a_worker_without_the_new_secret_retries_until_the_link_expires(
    db: asyncpg.Connection, database_url: str, smtp_server: SmtpServer
) -> None:
    api_keys = TokenKeys((NEW_SECRET, TEST_SECRET))  # the API was rolled out first
    worker_keys = TokenKeys((TEST_SECRET,))
    recorder = Recorder()
    async with running_worker(database_url, worker_keys, smtp_server.settings(), recorder=recorder):
        enqueued = await enqueue(db, api_keys, "early@example.com")
        with anyio.fail_after(WAIT):
            await recorder.wait_for_kind(events.Completed)
    row = await outbox_row(db, enqueued.outbox_id)
    assert row["status"] == "pending" and row["last_outcome"] == "transient"
    assert "retried until the link expires" in row["last_error"]
    assert len(recorder.of(events.UnknownTokenKey)) >= 1
    assert smtp_server.received == []


# -- 7. nothing derived from the address survives scrubbing ------------------------------------


async def test_the_request_fingerprint_is_keyed_and_scrubbing_clears_it(
    apps: Clients, db: asyncpg.Connection, pool: asyncpg.Pool
) -> None:
    created = await ask(apps.internal, "guess.me@example.com", user="ada")
    assert created.status_code == 202
    stored = bytes(await db.fetchval("SELECT request_fingerprint FROM notifier.verifications"))
    # The attack that worked: hash each guess the way the fingerprint was made.
    for guess in ("ada@example.com", "guess.me@example.com", "guess@example.com"):
        unkeyed = hashlib.sha256(orjson.dumps(["ada", guess, "signup"])).digest()
        assert unkeyed != stored
    await db.execute(
        """UPDATE notifier.email_outbox SET status = 'sent', attempts = 1,
                  completed_at = now() - interval '8 days'"""
    )
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - interval '8 days'")
    await cleanup(pool, RetentionSettings(), 3600.0)
    row = await db.fetchrow("SELECT * FROM notifier.verifications")
    assert (row["idempotency_key"], row["request_fingerprint"]) == (None, None)
    assert (row["email"], row["mailbox"]) == ("g***@example.com", "g***@example.com")


# -- 8. addresses -------------------------------------------------------------------------------


async def test_a_local_part_over_64_characters_is_refused(
    apps: Clients, db: asyncpg.Connection
) -> None:
    response = await ask(apps.internal, "a" * 65 + "@example.com")
    assert response.status_code == 422 and "64" in response.json()["error"]["message"]
    assert (await ask(apps.internal, "a" * 64 + "@example.com")).status_code == 202
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 1


@pytest.fixture
def plain_relay() -> Any:
    """A mail server that does not offer SMTPUTF8, as many relays do not."""
    with SmtpServer(smtputf8=False) as server:
        yield server


async def test_an_ascii_mailbox_at_an_idn_domain_goes_out_as_punycode_without_smtputf8(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, plain_relay: SmtpServer
) -> None:
    row, _ = await deliver_one(db, database_url, keys, plain_relay, "user@bücher.de")
    assert row["status"] == "sent"
    [received] = plain_relay.kept
    assert received.recipients == ["user@xn--bcher-kva.de"]
    assert b"To: user@xn--bcher-kva.de" in received.content


async def test_a_non_ascii_mailbox_without_smtputf8_fails_clearly_and_is_not_suppressed(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, plain_relay: SmtpServer
) -> None:
    row, _ = await deliver_one(db, database_url, keys, plain_relay, "jösé@example.com")
    assert row["status"] == "failed" and "SMTPUTF8" in row["last_error"]
    assert await suppressed(db) == []


async def test_a_suppression_refuses_the_address_whatever_its_case(
    apps: Clients, db: asyncpg.Connection
) -> None:
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason) VALUES ('gone@example.com', 'x')"
    )
    for spelling in ("Gone@example.com", "gone@EXAMPLE.com"):
        refused = await ask(apps.internal, spelling)
        assert refused.json()["error"]["code"] == "email_suppressed"


async def test_a_suppression_is_cleared_by_its_address_whatever_its_case(
    apps: Clients, db: asyncpg.Connection
) -> None:
    await db.execute(
        "INSERT INTO notifier.suppressed_addresses (email, reason) VALUES ('gone@example.com', 'x')"
    )
    cleared = await apps.internal.delete("/v1/suppressions/Gone@Example.com")
    assert cleared.status_code == 204 and await suppressed(db) == []


# -- 9. a code guesser gets what docs/operations.md states, however they ask -----------------


def stated_guesses_per_mailbox_per_day() -> int:
    text = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    stated = re.search(r"\*\*(\d+) judged guesses per mailbox per day\*\*", text)
    assert stated is not None, "docs/operations.md states no guesses per mailbox per day"
    return int(stated.group(1))


async def test_a_code_guesser_gets_the_stated_guesses_per_mailbox_per_day_across_requests(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    # The attacker drives an app: a new request (another user id, another spelling of the
    # victim's address) whenever a code locks, guessing until nothing is judged any more.
    judged = 0
    spellings = ["victim@example.com", "Victim@example.com", "victim+x@example.com"]
    for attempt in range(10):
        created = await apps.internal.post(
            "/v1/verifications",
            json={"user_id": f"u{attempt}", "email": spellings[attempt % 3], "method": "code"},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert created.status_code == 202, created.text
        path = f"/v1/verifications/{created.json()['id']}/code"
        right = await code_of(db, keys, created.json()["id"])
        guess = str((int(right) + 1) % 10**6).zfill(6)
        while (answer := await apps.internal.post(path, json={"code": guess})).status_code == 400:
            judged += 1
        assert answer.json()["result"] == "locked"
    assert judged == stated_guesses_per_mailbox_per_day() == CodeSettings().mailbox_failures
    # And the victim's own right code is refused as long as the budget is spent.
    refused = await apps.internal.post(path, json={"code": right})
    assert refused.status_code in (423, 429) and refused.json()["result"] == "locked"
