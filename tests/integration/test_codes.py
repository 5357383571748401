"""Verification by code: what the email carries, what a submitted code does, and the limits
that hold against a guesser however the guesses arrive."""

from __future__ import annotations

import email
import email.policy
import hashlib
import re
import uuid
from email.message import EmailMessage
from typing import Any

import anyio
import asyncpg
import pytest

import notifier
from notifier import events
from notifier.config import CodeSettings, RetentionSettings
from notifier.storage.codes import UnknownVerification, check
from notifier.storage.drivers import CatalogueRunner
from notifier.storage.maintenance import cleanup
from notifier.storage.outbox import confirm, request_standalone
from notifier.tokens import TokenKeys
from notifier.verifications import CodeCheck, NoCode, Policy
from tests.conftest import TEST_SECRET
from tests.support.apps import Clients, bearer, make_key, serve
from tests.support.deliveries import code_of, link_token, policy_for_tests
from tests.support.recorder import recorded
from tests.support.smtp_server import SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 15
EMAIL = "ada@example.com"
OLD_SECRET = "old-secret-" + "o" * 32
NEW_SECRET = "new-secret-" + "n" * 32


@pytest.fixture
def policy(keys: TokenKeys) -> Policy:
    return policy_for_tests(keys)


async def requested(
    conn: Any,
    policy: Policy,
    method: str = "code",
    email_address: str = EMAIL,
    user_id: str = "ada",
    client_id: str | None = None,
) -> uuid.UUID:
    result = await request_standalone(
        conn,
        user_id=user_id,
        email=email_address,
        policy=policy,
        method=method,
        client_id=client_id,
    )
    return result.id


async def submit(conn: Any, policy: Policy, verification_id: uuid.UUID, code: str) -> CodeCheck:
    return await check(CatalogueRunner(conn), verification_id, code, policy=policy)


def wrong_code(right: str) -> str:
    return str((int(right) + 1) % 10 ** len(right)).zfill(len(right))


def parsed(content: bytes) -> EmailMessage:
    message = email.message_from_bytes(content, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    return message


def parts(message: EmailMessage) -> tuple[str, str]:
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    return text.get_content(), html.get_content()


async def events_of(db: asyncpg.Connection, verification_id: uuid.UUID) -> list[str]:
    rows = await db.fetch(
        "SELECT type FROM notifier.events WHERE verification_id = $1 ORDER BY id", verification_id
    )
    return [r["type"] for r in rows]


async def delivered(
    database_url: str, keys: TokenKeys, smtp_server: SmtpServer, count: int = 1
) -> list[EmailMessage]:
    """Runs a worker until `count` deliveries completed; the messages the server kept."""
    async with running_worker(database_url, keys, smtp_server.settings()) as worker:
        with anyio.fail_after(WAIT):
            await recorded(worker).wait_for(lambda s: len(s.of(events.Completed)) >= count)
    return [parsed(r.content) for r in smtp_server.kept]


# -- the email ----------------------------------------------------------------------------------

_GROUPED = re.compile(r"^\s*(\d{3,4}(?: \d{3,4}){1,2})\s*$", re.MULTILINE)


async def test_the_code_read_from_the_email_a_real_smtp_server_received_confirms_it(
    apps: Clients,
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
) -> None:
    body = {"user_id": "ada", "email": EMAIL, "method": "code"}
    accepted = await apps.internal.post(
        "/v1/verifications", json=body, headers={"Idempotency-Key": "k1"}
    )
    assert accepted.status_code == 202 and accepted.json()["method"] == "code"
    verification_id = accepted.json()["id"]
    [message] = await delivered(database_url, keys, smtp_server)
    text, _ = parts(message)
    typed = _GROUPED.search(text)
    assert typed is not None, text
    answer = await apps.internal.post(
        f"/v1/verifications/{verification_id}/code", json={"code": typed.group(1)}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"] == "verified"
    status = (await apps.internal.get(f"/v1/verifications/{verification_id}")).json()
    assert status["verified"] and status["method"] == "code"
    assert "verification.confirmed" in await events_of(db, uuid.UUID(verification_id))


async def test_a_code_requests_email_carries_the_code_in_both_parts_and_no_link(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    policy: Policy,
) -> None:
    verification_id = await requested(db, policy, "code")
    code = await code_of(db, keys, verification_id)
    [message] = await delivered(database_url, keys, smtp_server)
    grouped = f"{code[:3]} {code[3:]}"
    for part in parts(message):
        assert grouped in part
        assert "/verify?token=" not in part
    assert code not in str(message["Subject"]) and grouped not in str(message["Subject"])


async def test_a_link_requests_email_carries_no_code(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    policy: Policy,
) -> None:
    await requested(db, policy, "link")
    [message] = await delivered(database_url, keys, smtp_server)
    for part in parts(message):
        assert "/verify?token=" in part
        assert _GROUPED.search(part) is None
    assert await db.fetchval("SELECT code_hash FROM notifier.verifications") is None


async def test_a_link_and_code_email_carries_both_and_the_link_confirms_it_too(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    policy: Policy,
) -> None:
    verification_id = await requested(db, policy, "link_and_code")
    code = await code_of(db, keys, verification_id)
    [message] = await delivered(database_url, keys, smtp_server)
    for part in parts(message):
        assert "/verify?token=" in part and f"{code[:3]} {code[3:]}" in part
    token = await link_token(db, keys, verification_id)
    assert (await confirm(db, token, apply=True, keys=keys)).outcome == "verified"
    assert (await submit(db, policy, verification_id, code)).outcome == "already_verified"


async def test_a_german_code_email_is_in_german(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    policy: Policy,
) -> None:
    await request_standalone(
        db, user_id="u", email=EMAIL, policy=policy, method="code", locale="de"
    )
    [message] = await delivered(database_url, keys, smtp_server)
    text, html = parts(message)
    assert str(message["Subject"]).startswith("Ihr Bestätigungscode")
    assert "Der Code ist 10 Minuten gültig" in text
    assert '<html lang="de"' in html


async def test_the_default_method_is_the_settings(db: asyncpg.Connection, keys: TokenKeys) -> None:
    policy = policy_for_tests(keys, codes=CodeSettings(method="link_and_code"))
    result = await request_standalone(db, user_id="u", email=EMAIL, policy=policy)
    assert result.method == "link_and_code"
    assert await db.fetchval("SELECT method FROM notifier.verifications") == "link_and_code"


async def test_an_unknown_method_is_refused_and_writes_nothing(
    db: asyncpg.Connection, policy: Policy
) -> None:
    with pytest.raises(notifier.InvalidRequest) as refused:
        await requested(db, policy, "sms")
    assert refused.value.field == "method"
    assert await db.fetchval("SELECT count(*) FROM notifier.verifications") == 0


async def test_a_code_only_verification_lives_as_long_as_its_code(
    db: asyncpg.Connection, policy: Policy
) -> None:
    await requested(db, policy, "code")
    row = await db.fetchrow(
        "SELECT expires_at - created_at AS lives, code_expires_at - created_at AS code_lives "
        "FROM notifier.verifications"
    )
    assert row["lives"].total_seconds() == row["code_lives"].total_seconds() == 600


async def test_a_link_and_codes_code_lives_its_own_ten_minutes_and_the_link_its_hour(
    db: asyncpg.Connection, policy: Policy
) -> None:
    await requested(db, policy, "link_and_code")
    row = await db.fetchrow(
        "SELECT expires_at - created_at AS lives, code_expires_at - created_at AS code_lives "
        "FROM notifier.verifications"
    )
    assert (row["lives"].total_seconds(), row["code_lives"].total_seconds()) == (3600, 600)


# -- what a code does ---------------------------------------------------------------------------


async def test_four_wrong_codes_then_the_right_one_confirms(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy)
    code = await code_of(db, keys, verification_id)
    remaining = [
        (await submit(db, policy, verification_id, wrong_code(code))).attempts_remaining
        for _ in range(4)
    ]
    assert remaining == [4, 3, 2, 1]
    assert (await submit(db, policy, verification_id, code)).outcome == "verified"


async def test_five_wrong_codes_lock_it_and_the_right_one_no_longer_confirms(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy)
    code = await code_of(db, keys, verification_id)
    answers = [await submit(db, policy, verification_id, wrong_code(code)) for _ in range(5)]
    assert [a.outcome for a in answers] == ["wrong"] * 5 and answers[-1].attempts_remaining == 0
    after = await submit(db, policy, verification_id, code)
    assert (after.outcome, after.locked_by) == ("locked", "attempts")
    assert await db.fetchval("SELECT verified_at FROM notifier.verifications") is None
    assert (await events_of(db, verification_id)).count("verification.code_locked") == 1


async def test_fifty_concurrent_wrong_codes_are_all_answered_and_only_five_are_judged(
    pool: asyncpg.Pool, db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy)
    code = await code_of(db, keys, verification_id)
    answers: list[CodeCheck] = []

    async def guess() -> None:
        async with pool.acquire() as conn:
            answers.append(await submit(conn, policy, verification_id, wrong_code(code)))

    async with anyio.create_task_group() as tasks:
        for _ in range(50):
            tasks.start_soon(guess)
    outcomes = sorted(a.outcome for a in answers)
    assert outcomes == ["locked"] * 45 + ["wrong"] * 5
    remaining = [a.attempts_remaining for a in answers if a.outcome == "wrong"]
    assert sorted(r for r in remaining if r is not None) == [0, 1, 2, 3, 4]
    row = await db.fetchrow("SELECT code_failures, code_locked_at FROM notifier.verifications")
    assert row["code_failures"] == 5 and row["code_locked_at"] is not None
    assert (await events_of(db, verification_id)).count("verification.code_locked") == 1


async def test_two_concurrent_right_codes_confirm_it_once(
    pool: asyncpg.Pool, db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy)
    code = await code_of(db, keys, verification_id)
    answers: list[str] = []

    async def enter() -> None:
        async with pool.acquire() as conn:
            answers.append((await submit(conn, policy, verification_id, code)).outcome)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(enter)
        tasks.start_soon(enter)
    assert sorted(answers) == ["already_verified", "verified"]
    assert (await events_of(db, verification_id)).count("verification.confirmed") == 1


async def test_an_expired_code_is_refused_and_counts_nothing(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy, "link_and_code")
    code = await code_of(db, keys, verification_id)
    await db.execute(
        "UPDATE notifier.verifications SET code_expires_at = now() - interval '1 second'"
    )
    assert (await submit(db, policy, verification_id, code)).outcome == "expired"
    assert (await submit(db, policy, verification_id, wrong_code(code))).outcome == "expired"
    assert await db.fetchval("SELECT code_failures FROM notifier.verifications") == 0


async def test_a_code_a_resend_replaced_is_expired_and_names_its_successor(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    first = await requested(db, policy)
    old_code = await code_of(db, keys, first)
    second = await requested(db, policy)
    answer = await submit(db, policy, first, old_code)
    assert (answer.outcome, answer.superseded_by) == ("expired", second)
    new_code = await code_of(db, keys, second)
    if new_code != old_code:  # one chance in a million that they are the same
        assert (await submit(db, policy, second, old_code)).outcome == "wrong"
    assert (await submit(db, policy, second, new_code)).outcome == "verified"


async def test_a_code_after_the_link_was_used_answers_already_verified(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy, "link_and_code")
    code = await code_of(db, keys, verification_id)
    token = await link_token(db, keys, verification_id)
    await confirm(db, token, apply=True, keys=keys)
    assert (await submit(db, policy, verification_id, code)).outcome == "already_verified"


async def test_a_link_locked_by_wrong_codes_still_confirms_by_its_link(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy, "link_and_code")
    code = await code_of(db, keys, verification_id)
    for _ in range(5):
        await submit(db, policy, verification_id, wrong_code(code))
    token = await link_token(db, keys, verification_id)
    assert (await confirm(db, token, apply=True, keys=keys)).outcome == "verified"


async def test_spaces_and_dashes_in_a_typed_code_are_ignored(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy)
    code = await code_of(db, keys, verification_id)
    typed = f" {code[:3]} - {code[3:]}\t"
    assert (await submit(db, policy, verification_id, typed)).outcome == "verified"


async def test_full_width_digits_read_as_plain_ones(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy)
    full_width = "".join(chr(0xFF10 + int(d)) for d in await code_of(db, keys, verification_id))
    assert (await submit(db, policy, verification_id, full_width)).outcome == "verified"


@pytest.mark.parametrize("typed", ["000000x", "abcdef", "1" * 64, "12345", "🙂", "\udc80"])
async def test_every_wrong_code_gets_the_same_answer_whatever_was_wrong_with_it(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy, typed: str
) -> None:
    verification_id = await requested(db, policy)
    answer = await submit(db, policy, verification_id, typed)
    assert answer == CodeCheck("wrong", verification_id, attempts_remaining=4)


async def test_a_code_made_with_a_secret_since_removed_is_expired(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    old_keys = TokenKeys((OLD_SECRET,))
    verification_id = await requested(db, policy_for_tests(old_keys))
    code = await code_of(db, old_keys, verification_id)
    assert (await submit(db, policy_for_tests(keys), verification_id, code)).outcome == "expired"


async def test_a_code_made_before_a_rotation_confirms_while_its_secret_is_kept(
    db: asyncpg.Connection, keys: TokenKeys
) -> None:
    before = policy_for_tests(keys)
    verification_id = await requested(db, before)
    code = await code_of(db, keys, verification_id)
    rotated = policy_for_tests(TokenKeys((NEW_SECRET, TEST_SECRET)))
    assert (await submit(db, rotated, verification_id, code)).outcome == "verified"


async def test_a_link_only_verification_has_no_code_to_judge(
    db: asyncpg.Connection, policy: Policy
) -> None:
    verification_id = await requested(db, policy, "link")
    with pytest.raises(NoCode):
        await submit(db, policy, verification_id, "123456")


async def test_an_unknown_verification_is_not_found(db: asyncpg.Connection, policy: Policy) -> None:
    with pytest.raises(UnknownVerification):
        await submit(db, policy, uuid.uuid4(), "123456")


# -- the budget a resend cannot reset -----------------------------------------------------------


@pytest.fixture
def budget(keys: TokenKeys) -> Policy:
    return policy_for_tests(keys, codes=CodeSettings(mailbox_failures=7))


async def test_the_mailbox_budget_survives_a_resend_and_a_new_request(
    db: asyncpg.Connection, keys: TokenKeys, budget: Policy
) -> None:
    first = await requested(db, budget)
    for _ in range(5):
        await submit(db, budget, first, wrong_code(await code_of(db, keys, first)))
    resent = await requested(db, budget)  # the same user: a resend, replacing the first
    code = await code_of(db, keys, resent)
    assert [(await submit(db, budget, resent, wrong_code(code))).outcome for _ in range(2)] == [
        "wrong",
        "wrong",
    ]
    spent = await submit(db, budget, resent, code)
    assert (spent.outcome, spent.locked_by) == ("locked", "mailbox")
    assert spent.retry_after is not None and 0 < spent.retry_after <= 86400
    # Another user asking for the same mailbox (any spelling of it) shares its budget.
    stranger = await requested(
        db, budget, email_address="Ada+new@Example.com", user_id="somebody-else"
    )
    answer = await submit(db, budget, stranger, await code_of(db, keys, stranger))
    assert (answer.outcome, answer.locked_by) == ("locked", "mailbox")
    assert (
        await db.fetchval(
            "SELECT count(*) FROM notifier.verifications WHERE verified_at IS NOT NULL"
        )
        == 0
    )


async def test_the_mailbox_budget_counts_only_wrong_codes_within_its_window(
    db: asyncpg.Connection, keys: TokenKeys, budget: Policy
) -> None:
    first = await requested(db, budget)
    for _ in range(5):
        await submit(db, budget, first, wrong_code(await code_of(db, keys, first)))
    await db.execute("UPDATE notifier.request_counts SET slice = slice - interval '25 hours'")
    later = await requested(db, budget, email_address="ada@example.com", user_id="ada-2")
    code = await code_of(db, keys, later)
    for _ in range(2):
        await submit(db, budget, later, wrong_code(code))
    assert (await submit(db, budget, later, code)).outcome == "verified"


async def test_wrong_codes_at_a_verification_older_than_the_window_still_count(
    db: asyncpg.Connection, keys: TokenKeys, budget: Policy
) -> None:
    # A long-lived code guessed at long after it was asked for is no way round the budget:
    # a wrong code counts from when it was guessed.
    first = await requested(db, budget, "link_and_code")
    await db.execute(
        "UPDATE notifier.verifications SET created_at = now() - interval '25 hours', "
        "code_expires_at = now() + interval '1 hour'"
    )
    for _ in range(5):
        await submit(db, budget, first, wrong_code(await code_of(db, keys, first)))
    later = await requested(db, budget, user_id="ada-2")
    code = await code_of(db, keys, later)
    for _ in range(2):
        await submit(db, budget, later, wrong_code(code))
    assert (await submit(db, budget, later, code)).locked_by == "mailbox"


async def test_cleanup_of_finished_verifications_gives_no_fresh_guesses(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys, budget: Policy
) -> None:
    for user in ("u1", "u2"):
        spent = await requested(db, budget, user_id=user)
        for _ in range(5):
            await submit(db, budget, spent, wrong_code(await code_of(db, keys, spent)))
    # Both finished long ago as far as retention can tell: scrubbed, then deleted.
    await db.execute(
        "UPDATE notifier.email_outbox SET status = 'expired', completed_at = now() - "
        "interval '2 hours'"
    )
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - interval '1 hour'")
    quick = RetentionSettings(scrub_after=60, retention=60)
    report = await cleanup(pool, quick, 3600.0, budget.codes.failure_window)
    assert report.scrubbed == 2 and report.deleted == 2
    later = await requested(db, budget, user_id="u3")
    answer = await submit(db, budget, later, await code_of(db, keys, later))
    assert (answer.outcome, answer.locked_by) == ("locked", "mailbox")


async def test_cleanup_forgets_a_mailboxs_wrong_codes_once_they_leave_the_window(
    db: asyncpg.Connection, pool: asyncpg.Pool, keys: TokenKeys, budget: Policy
) -> None:
    spent = await requested(db, budget)
    for _ in range(5):
        await submit(db, budget, spent, wrong_code(await code_of(db, keys, spent)))
    await db.execute("UPDATE notifier.request_counts SET slice = slice - interval '25 hours'")
    await cleanup(pool, RetentionSettings(), 3600.0, budget.codes.failure_window)
    assert await db.fetchval("SELECT count(*) FROM notifier.request_counts") == 0


async def test_a_mailboxs_wrong_codes_are_counted_by_a_keyed_hash_never_the_address(
    db: asyncpg.Connection, keys: TokenKeys, budget: Policy
) -> None:
    spent = await requested(db, budget)
    await submit(db, budget, spent, wrong_code(await code_of(db, keys, spent)))
    [subject] = await db.fetch("SELECT subject FROM notifier.request_counts")
    assert bytes(subject["subject"]) != hashlib.sha256(EMAIL.encode()).digest()
    assert EMAIL.encode() not in bytes(subject["subject"])


async def test_a_code_only_verification_has_no_link_that_confirms_it(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy, "code")
    token = await link_token(db, keys, verification_id)  # derived as a link would be
    assert (await confirm(db, token, apply=True, keys=keys)).outcome == "invalid"
    assert await db.fetchval("SELECT verified_at FROM notifier.verifications") is None


async def test_a_fresh_link_asked_for_from_an_expired_link_is_a_link_whatever_the_default(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    first = await request_standalone(
        db, user_id="ada", email=EMAIL, policy=policy_for_tests(keys), method="link_and_code"
    )
    token = await link_token(db, keys, first.id)
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - interval '1 s'")
    renewed = await apps.public.post("/verify/resend", data={"token": token})
    assert renewed.status_code == 202, renewed.text
    methods = await db.fetch("SELECT method FROM notifier.verifications ORDER BY created_at")
    assert [m["method"] for m in methods] == ["link_and_code", "link"]


# -- who may confirm ----------------------------------------------------------------------------


async def test_another_api_keys_verification_is_not_found_and_counts_nothing(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    accepted = await apps.internal.post(
        "/v1/verifications",
        json={"user_id": "ada", "email": EMAIL, "method": "code"},
        headers={"Idempotency-Key": "k1"},
    )
    verification_id = accepted.json()["id"]
    other = await make_key(db, ["request", "read"], name="another app")
    answer = await apps.internal.post(
        f"/v1/verifications/{verification_id}/code",
        json={"code": await code_of(db, keys, verification_id)},
        headers=bearer(other),
    )
    assert answer.status_code == 404
    assert await db.fetchval("SELECT verified_at FROM notifier.verifications") is None
    assert await db.fetchval("SELECT code_failures FROM notifier.verifications") == 0


async def test_a_library_verification_is_not_confirmed_through_the_api(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy)
    answer = await apps.internal.post(
        f"/v1/verifications/{verification_id}/code",
        json={"code": await code_of(db, keys, verification_id)},
    )
    assert answer.status_code == 404


async def test_the_app_confirms_the_code_of_a_console_resend_of_its_own_verification(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    app_id = apps.key.split("_")[1]
    support_id = (await make_key(db, ["admin"], name="support")).split("_")[1]
    first = await requested(db, policy, client_id=app_id)
    resent = await request_standalone(
        db,
        user_id="ada",
        email=EMAIL,
        policy=policy,
        method="code",
        client_id=support_id,
        replaces=first,
    )
    answer = await apps.internal.post(
        f"/v1/verifications/{resent.id}/code", json={"code": await code_of(db, keys, resent.id)}
    )
    assert answer.status_code == 200 and answer.json()["result"] == "verified"


# -- the API ------------------------------------------------------------------------------------


async def test_the_apis_answers_and_statuses_for_each_outcome(
    apps: Clients, db: asyncpg.Connection, keys: TokenKeys
) -> None:
    api = apps.internal
    accepted = await api.post(
        "/v1/verifications",
        json={"user_id": "ada", "email": EMAIL, "method": "code"},
        headers={"Idempotency-Key": "k1"},
    )
    verification = f"/v1/verifications/{accepted.json()['id']}"
    path = f"{verification}/code"
    code = await code_of(db, keys, accepted.json()["id"])
    wrong = await api.post(path, json={"code": wrong_code(code)})
    assert wrong.status_code == 400
    assert wrong.json()["result"] == "wrong" and wrong.json()["attempts_remaining"] == 4
    status = (await api.get(verification)).json()
    assert (status["code_attempts_remaining"], status["locked"]) == (4, False)
    for _ in range(4):
        await api.post(path, json={"code": wrong_code(code)})
    locked = await api.post(path, json={"code": code})
    assert locked.status_code == 423 and locked.json()["locked_by"] == "attempts"
    status = (await api.get(verification)).json()
    assert (status["code_attempts_remaining"], status["locked"]) == (0, True)


async def test_the_api_refuses_a_code_for_a_link_only_verification_with_409(
    apps: Clients,
) -> None:
    accepted = await apps.internal.post(
        "/v1/verifications",
        json={"user_id": "ada", "email": EMAIL},
        headers={"Idempotency-Key": "1"},
    )
    answer = await apps.internal.post(
        f"/v1/verifications/{accepted.json()['id']}/code", json={"code": "123456"}
    )
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "no_code"


async def test_a_read_key_cannot_submit_codes(apps: Clients, db: asyncpg.Connection) -> None:
    reader = await make_key(db, ["read"])
    answer = await apps.internal.post(
        f"/v1/verifications/{uuid.uuid4()}/code", json={"code": "123456"}, headers=bearer(reader)
    )
    assert answer.status_code == 403


# -- the library call ---------------------------------------------------------------------------


async def test_the_library_call_confirms_outside_a_transaction(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy)
    code = await code_of(db, keys, verification_id)
    answer = await notifier.confirm_code(db, verification_id, code, policy=policy)
    assert answer.outcome == "verified"


async def test_the_library_call_refuses_to_run_inside_a_transaction(
    db: asyncpg.Connection, keys: TokenKeys, policy: Policy
) -> None:
    verification_id = await requested(db, policy)
    async with db.transaction():
        with pytest.raises(notifier.InTransaction):
            await notifier.confirm_code(db, verification_id, "000000", policy=policy)
    assert await db.fetchval("SELECT code_failures FROM notifier.verifications") == 0


async def test_the_sync_library_call_confirms_on_psycopg_in_autocommit(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, policy: Policy
) -> None:
    psycopg = pytest.importorskip("psycopg")
    verification_id = await requested(db, policy)
    code = await code_of(db, keys, verification_id)

    def confirm_sync() -> str:
        with psycopg.connect(database_url, autocommit=True) as conn:
            return notifier.confirm_code_sync(conn, verification_id, code, policy=policy).outcome

    assert await anyio.to_thread.run_sync(confirm_sync) == "verified"


# -- no code anywhere but the email -------------------------------------------------------------


async def test_no_code_is_in_the_database_logs_spans_or_metrics(
    otel: Any,
    db: asyncpg.Connection,
    pool: asyncpg.Pool,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Ten digits, so a chance match in a dump of timestamps and ids is out of the question.
    policy = policy_for_tests(keys, codes=CodeSettings(digits=10))
    caplog.set_level("DEBUG")
    async with serve(pool, policy) as apps:
        accepted = await apps.internal.post(
            "/v1/verifications",
            json={"user_id": "ada", "email": EMAIL, "method": "code"},
            headers={"Idempotency-Key": "k1"},
        )
        verification_id = accepted.json()["id"]
        code = await code_of(db, keys, verification_id)
        await delivered(database_url, keys, smtp_server)
        path = f"/v1/verifications/{verification_id}/code"
        await apps.internal.post(path, json={"code": wrong_code(code)})
        assert (await apps.internal.post(path, json={"code": code})).json()["result"] == "verified"
        metrics = (await apps.internal.get("/metrics")).text
    assert code in smtp_server.kept[0].content.decode().replace(" ", "")  # it was sent
    dump = await db.fetchval(
        """SELECT string_agg(t::text, ' ') FROM (
               SELECT row_to_json(v)::text AS t FROM notifier.verifications v
               UNION ALL SELECT row_to_json(o)::text FROM notifier.email_outbox o
               UNION ALL SELECT row_to_json(a)::text FROM notifier.delivery_attempts a
               UNION ALL SELECT row_to_json(e)::text FROM notifier.events e) rows"""
    )
    digests = {hashlib.sha256(code.encode()).hexdigest(), hashlib.sha256(code.encode()).digest()}
    stored = bytes(await db.fetchval("SELECT code_hash FROM notifier.verifications"))
    assert code not in dump and stored not in digests
    assert not any(isinstance(d, str) and d in dump for d in digests)
    assert code not in caplog.text
    assert code not in metrics
    for span in otel.spans.get_finished_spans():
        values = " ".join(str(v) for v in (span.attributes or {}).values())
        assert code not in values, span.name


# -- the comparison -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (b"\x01" * 32, b"\x01" * 32, True),
        (b"\x01" * 32, b"\x01" * 31 + b"\x00", False),  # the last byte differs
        (b"\x01" * 32, b"\x00" + b"\x01" * 31, False),  # the first byte differs
        (b"\x01" * 32, b"\x01" * 31, False),  # a shorter digest
        (b"", b"", False),  # nothing is never a match
    ],
)
async def test_the_digest_comparison_is_equality_over_every_byte(
    db: asyncpg.Connection, a: bytes, b: bytes, equal: bool
) -> None:
    assert await db.fetchval("SELECT notifier.digests_equal_v1($1, $2)", a, b) is equal
