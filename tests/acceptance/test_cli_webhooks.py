"""`notifier webhooks` and the return-URL side of `notifier keys`, as a real process."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from standardwebhooks.webhooks import Webhook

from notifier.return_urls import check_return, signed_return
from notifier.tokens import TokenKeys
from tests.conftest import TEST_SECRET
from tests.support.cli import run_cli

pytestmark = pytest.mark.anyio

URL = "https://93.184.216.34/hooks"  # a public literal: registered with no lookup


def env(database_url: str, **extra: str) -> dict[str, str]:
    return {"NOTIFIER_DATABASE_URL": database_url, "NOTIFIER_TOKEN_SECRET": TEST_SECRET, **extra}


async def test_add_prints_the_id_then_the_secret_once_and_list_shows_it(
    db: asyncpg.Connection, database_url: str
) -> None:
    added = await run_cli(
        "webhooks", "add", URL, "--events", "verification.confirmed,verification.failed",
        env=env(database_url),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    endpoint_id, secret = added.stdout.split()
    assert uuid.UUID(endpoint_id) and secret.startswith("whsec_")
    Webhook(secret)  # a secret the spec's library takes
    listed = await run_cli("webhooks", "list", env=env(database_url))
    assert listed.returncode == 0
    assert endpoint_id in listed.stdout and URL in listed.stdout
    # In the vocabulary's order, whatever order they were given in.
    assert "verification.failed,verification.confirmed" in listed.stdout
    assert secret not in listed.stdout and "healthy" in listed.stdout


async def test_rotate_prints_a_new_secret_and_remove_takes_the_endpoint_away(
    db: asyncpg.Connection, database_url: str
) -> None:
    added = await run_cli("webhooks", "add", URL, env=env(database_url))
    endpoint_id, secret = added.stdout.split()
    rotated = await run_cli("webhooks", "rotate", endpoint_id, env=env(database_url))
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.strip().startswith("whsec_") and rotated.stdout.strip() != secret
    assert "the old secret signs beside it until" in rotated.stderr
    removed = await run_cli("webhooks", "remove", endpoint_id, env=env(database_url))
    assert removed.returncode == 0
    assert await db.fetchval("SELECT count(*) FROM notifier.webhook_endpoints") == 0


async def test_a_private_target_is_refused_unless_private_targets_are_allowed(
    db: asyncpg.Connection, database_url: str
) -> None:
    local = "http://127.0.0.1:9/hooks"
    refused = await run_cli("webhooks", "add", local, env=env(database_url))
    assert refused.returncode == 2
    assert "must be https" in refused.stderr
    allowed = await run_cli(
        "webhooks", "add", local, env=env(database_url, NOTIFIER_WEBHOOK_ALLOW_PRIVATE="true")
    )
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.parametrize("action", ["remove", "rotate", "enable"])
async def test_a_bad_or_unknown_endpoint_id_is_a_clear_error(
    database_url: str, action: str
) -> None:
    for endpoint_id in ("not-an-id", str(uuid.uuid4())):
        result = await run_cli("webhooks", action, endpoint_id, env=env(database_url))
        assert result.returncode == 2
        assert "endpoint" in result.stderr and "Traceback" not in result.stderr


async def test_return_secret_prints_what_checks_the_redirects_of_that_key(
    database_url: str,
) -> None:
    result = await run_cli("keys", "return-secret", "0123456789ab", env=env(database_url))
    assert result.returncode == 0, result.stderr
    [(key_id, secret)] = [line.split() for line in result.stdout.splitlines()]
    keys = TokenKeys((TEST_SECRET,))
    assert key_id == keys.current_key_id
    url = signed_return("https://app.example.com/", uuid.uuid4(), "verified", keys, "0123456789ab")
    check_return(url, keys, client_id="0123456789ab")
    assert len(secret) == 43  # 32 bytes, base64url unpadded


async def test_a_keys_return_urls_are_narrowed_and_widened_again(
    db: asyncpg.Connection, database_url: str
) -> None:
    created = await run_cli(
        "keys", "create", "shop", "--return-url", "https://shop.example.org/",
        env=env(database_url),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    key_id = await db.fetchval("SELECT id FROM notifier.api_keys")
    assert await db.fetchval("SELECT return_urls FROM notifier.api_keys") == [
        "https://shop.example.org/"
    ]
    widened = await run_cli("keys", "return-urls", key_id, env=env(database_url))
    assert widened.returncode == 0
    assert "all of NOTIFIER_RETURN_URLS" in widened.stdout
    assert await db.fetchval("SELECT return_urls FROM notifier.api_keys") is None
    bad = await run_cli("keys", "return-urls", key_id, "not a url", env=env(database_url))
    assert bad.returncode == 2 and "--return-url" in bad.stderr
