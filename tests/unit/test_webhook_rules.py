"""The pure rules of webhooks: which addresses they may reach, what an HTTP answer means and
when a delivery is tried again, and signatures the Standard Webhooks library accepts."""

from __future__ import annotations

import ipaddress
import uuid

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from notifier.settings_values import schedule
from notifier.tokens import TokenKeys, UnknownKeyError
from notifier.webhook_outcomes import MAX_RETRY_AFTER_SECONDS, outcome_of, retry_delay
from notifier.webhook_signing import SecretRef, headers, secret_of, shown
from notifier.webhook_targets import TargetRefused, check_url, forbidden, resolve

pytestmark = pytest.mark.anyio

KEYS = TokenKeys(("a webhook test secret, thirty-two chars or more",))


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.255.0.9",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "192.0.2.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "2002:7f00:0001::1",
        "64:ff9b::7f00:1",
        "64:ff9b::a00:1",
        "64:ff9b:1:7f00:0:100:808:808",  # local-use NAT64: any reading may be internal
        "fec0::1",  # site-local
        "ff02::1",
        "2001:db8::1",
    ],
)
def test_no_address_inside_or_reserved_may_be_reached(address: str) -> None:
    assert forbidden(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "64:ff9b::808:808"]
)
def test_public_addresses_may_be_reached(address: str) -> None:
    assert forbidden(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/",
        "ftp://hooks.example.com/",
        "https://user@hooks.example.com/",
        "https://hooks.example.com/#x",
        "https:///nohost",
        "https://hooks.example.com:99999/",
        "https://hooks.exämple.com/",
        "https://hooks.example.com/ in",
        "https://hooks.example.com\\@evil.example/",
        "https://[::1]/",
    ],
)
def test_a_url_that_is_not_a_plain_public_https_one_is_refused_without_a_lookup(url: str) -> None:
    with pytest.raises(TargetRefused):
        check_url(url, allow_private=False)


@pytest.mark.parametrize(
    "url", ["https://127.1/", "https://2130706433/", "https://0x7f.1/", "https://0177.0.0.1/"]
)
async def test_a_loopback_address_in_a_short_or_numeric_form_is_refused_once_resolved(
    url: str,
) -> None:
    # The C resolver reads these as 127.0.0.1 without asking any DNS server.
    with pytest.raises(TargetRefused, match="loopback"):
        await resolve(check_url(url, allow_private=False), allow_private=False)


def test_allowing_private_targets_allows_http_and_loopback() -> None:
    target = check_url("http://127.0.0.1:8080/hooks", allow_private=True)
    assert (target.scheme, target.host, target.port) == ("http", "127.0.0.1", 8080)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(200, "delivered"), (204, "delivered"), (299, "delivered"), (301, "failed"),
     (302, "failed"), (400, "failed"), (404, "failed"), (410, "gone"), (429, "throttled"),
     (500, "failed"), (502, "failed"), (503, "throttled")],
)  # fmt: skip
def test_only_a_2xx_is_delivered(status: int, outcome: str) -> None:
    assert outcome_of(status) == outcome


def test_the_schedule_gives_each_retry_its_wait_then_none() -> None:
    waits = (5.0, 300.0, 1800.0)
    delays = [retry_delay("failed", attempt, waits) for attempt in (1, 2, 3, 4)]
    assert delays[3] is None
    for delay, wait in zip(delays[:3], waits, strict=True):
        assert delay is not None and wait * 0.9 <= delay <= wait * 1.1


def test_a_delivered_or_gone_delivery_is_never_retried() -> None:
    assert retry_delay("delivered", 1, (5.0,)) is None
    assert retry_delay("gone", 1, (5.0,)) is None


def test_retry_after_replaces_the_wait_capped_and_still_uses_an_attempt() -> None:
    assert retry_delay("throttled", 1, (5.0, 5.0), retry_after=42.0) == 42.0
    assert retry_delay("throttled", 1, (5.0,), retry_after=10**9) == MAX_RETRY_AFTER_SECONDS
    assert retry_delay("throttled", 2, (5.0,), retry_after=1.0) is None


def test_the_default_schedule_is_about_three_days() -> None:
    total = sum(schedule("5s,5m,30m,2h,5h,10h,14h,20h,24h"))
    assert 3 * 86400 < total < 3.2 * 86400


@pytest.mark.parametrize("raw", ["", "5x", "1,,2", "-1", "31d", ",".join(["1"] * 51)])
def test_a_malformed_schedule_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        schedule(raw)


def test_a_signature_is_one_the_standard_library_accepts() -> None:
    endpoint = uuid.uuid4()
    secret = secret_of(KEYS, endpoint, SecretRef.new(KEYS))
    body = b'{"type":"verification.confirmed"}'
    import time

    signed = headers("evt_0123", int(time.time()), body, [secret])
    Webhook(shown(secret)).verify(body, signed)
    with pytest.raises(WebhookVerificationError):
        Webhook(shown(secret)).verify(body + b" ", signed)


def test_each_endpoint_and_nonce_derives_its_own_secret() -> None:
    ref = SecretRef.new(KEYS)
    first = secret_of(KEYS, uuid.uuid4(), ref)
    assert first != secret_of(KEYS, uuid.uuid4(), ref)
    assert first != secret_of(KEYS, uuid.uuid4(), SecretRef.new(KEYS))
    assert len(first) == 32 and shown(first).startswith("whsec_")


def test_a_secret_made_with_a_token_secret_since_removed_cannot_be_derived() -> None:
    ref = SecretRef.new(KEYS)
    other = TokenKeys(("another webhook test secret, also long enough",))
    with pytest.raises(UnknownKeyError):
        secret_of(other, uuid.uuid4(), ref)
