"""What a mail server says about a person is kept safe to show and scrubbed with the person:
no address in any shape, no terminal escapes, nothing left after cleanup."""

from __future__ import annotations

from datetime import timedelta

import anyio
import asyncpg
import pytest

from notifier import events
from notifier.config import RetentionSettings
from notifier.storage.maintenance import cleanup
from notifier.tokens import TokenKeys
from tests.support.apps import Clients
from tests.support.deliveries import Enqueued, enqueue
from tests.support.recorder import Recorder
from tests.support.smtp_server import Reply, SmtpServer
from tests.support.workers import running_worker

pytestmark = pytest.mark.anyio

WAIT = 15
# An address the API accepts that no address pattern finds whole (braces end a local part).
ODD = "e}ada.lovelace{x@corp.example"


async def delivered(
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp: SmtpServer,
    email: str,
    user_id: str | None = None,
) -> Enqueued:
    recorder = Recorder()
    async with running_worker(database_url, keys, smtp.settings(), recorder=recorder):
        enqueued = await enqueue(db, keys, email, user_id=user_id)
        with anyio.fail_after(WAIT):
            await recorder.wait_for_kind(events.Completed)
    return enqueued


async def stored_texts(db: asyncpg.Connection) -> str:
    """Every reply text notifier keeps: attempts, last errors, provider ids, suppressions."""
    texts = await db.fetch(
        """SELECT detail AS t FROM notifier.delivery_attempts
           UNION ALL SELECT provider_message_id FROM notifier.delivery_attempts
           UNION ALL SELECT last_error FROM notifier.email_outbox
           UNION ALL SELECT provider_message_id FROM notifier.email_outbox
           UNION ALL SELECT reason FROM notifier.suppressed_addresses"""
    )
    return "\n".join(r["t"] for r in texts if r["t"] is not None)


async def test_an_address_a_server_echoes_in_an_odd_shape_is_stored_nowhere(
    apps: Clients,
    db: asyncpg.Connection,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
) -> None:
    smtp_server.plan(ODD, Reply("rcpt", f"550 5.1.1 <{ODD}>: no mailbox {ODD.upper()} here"))
    enqueued = await delivered(db, database_url, keys, smtp_server, ODD)
    kept = await stored_texts(db)
    assert "5.1.1" in kept and "lovelace" not in kept.lower(), kept
    attempts = (await apps.internal.get(f"/v1/verifications/{enqueued.id}/attempts")).json()
    assert "lovelace" not in str(attempts).lower()


async def test_an_address_echoed_in_the_accepting_reply_is_not_kept_as_the_provider_id(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    smtp_server.plan("e-ada{}@corp.example", Reply("data", "250 2.0.0 queued for e-ada{}"))
    await delivered(db, database_url, keys, smtp_server, "e-ada{}@corp.example")
    kept = await stored_texts(db)
    assert "2.0.0 queued" in kept and "e-ada{}" not in kept, kept


async def test_terminal_escapes_and_line_breaks_in_a_reply_are_stored_as_visible_escapes(
    db: asyncpg.Connection, database_url: str, keys: TokenKeys, smtp_server: SmtpServer
) -> None:
    hostile = "550-5.1.1 \x1b[2J\x1b[31mno such mailbox\r\n550 5.1.1 fake@row.example\tsuppressed"
    smtp_server.plan("gone@example.com", Reply("rcpt", hostile))
    await delivered(db, database_url, keys, smtp_server, "gone@example.com")
    reason = await db.fetchval("SELECT reason FROM notifier.suppressed_addresses")
    assert "\x1b" not in reason and "\n" not in reason and "\r" not in reason, repr(reason)
    assert "\\x1b[2J" in reason and "no such mailbox" in reason


async def test_cleanup_scrubs_the_user_id_and_everything_servers_said(
    db: asyncpg.Connection,
    pool: asyncpg.Pool,
    database_url: str,
    keys: TokenKeys,
    smtp_server: SmtpServer,
) -> None:
    smtp_server.plan("gone@example.com", Reply("rcpt", "550 5.1.1 no such user here"))
    await delivered(
        db, database_url, keys, smtp_server, "gone@example.com", user_id="gone@example.com"
    )
    await delivered(db, database_url, keys, smtp_server, "here@example.com", user_id="here@x")
    assert "queued as" in await stored_texts(db)
    old = timedelta(days=8)
    await db.execute(
        "UPDATE notifier.email_outbox SET completed_at = completed_at - $1::interval", old
    )
    await db.execute("UPDATE notifier.verifications SET expires_at = now() - $1::interval", old)
    assert (await cleanup(pool, RetentionSettings(), 3600.0)).scrubbed == 2
    users = sorted(
        r["user_id"] for r in await db.fetch("SELECT user_id FROM notifier.verifications")
    )
    assert users == ["g***", "h***"]
    kept = await stored_texts(db)
    assert "no such user" not in kept and "queued as" not in kept, kept
    # The suppression itself stays until it expires: it is what keeps mail from that address.
    row = await db.fetchrow("SELECT email, reason, smtp_code FROM notifier.suppressed_addresses")
    assert (row["email"], row["smtp_code"]) == ("gone@example.com", 550)
    assert "[scrubbed]" in row["reason"]
