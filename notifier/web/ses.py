"""Amazon SES bounce and complaint notifications through SNS: `POST /inbound/ses` on the
public listener, where nobody has a key, so every message proves itself before it is
believed.

In order, each step before anything costs more: the body is JSON of bounded size with the
fields SNS sends; its topic is one of NOTIFIER_SES_TOPICS; its SigningCertURL is https on an
SNS host (sns.<region>.amazonaws.com, path ending .pem) or under a prefix
NOTIFIER_SNS_CERTIFICATE_URLS trusts; only then is the certificate fetched (cached, bounded)
and the SignatureVersion 2 signature (RSA, SHA-256) checked over SNS's canonical string. A
subscription confirmation then confirms by GETting its SubscribeURL, held to the same
hosts. A notification becomes the same normalised reports (notifier.reports) that mailed
DSNs do, applied by the same statement: SES is the first provider; another is one such
module.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httpcore
import orjson
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from notifier import verp
from notifier.reports import BounceType, Report, diagnostic_of
from notifier.tokens import TokenKeys

log = logging.getLogger(__name__)

_STATUS = re.compile(r"[245]\.[0-9]{1,3}\.[0-9]{1,3}")
_SNS_HOST = re.compile(r"sns\.[a-z0-9-]{1,30}\.amazonaws\.com(?:\.cn)?")
# A signing certificate is a few kilobytes; refuse to read more.
MAX_CERTIFICATE_BYTES = 16 * 1024
FETCH_TIMEOUT_SECONDS = 5.0
# A message older than this is refused (SNS delivers within seconds, retries for an hour).
MAX_AGE = timedelta(hours=1)
_CACHED_CERTIFICATES = 16
_TYPES = ("Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation")
_BOUNCE_TYPES: dict[str, BounceType] = {
    "Permanent": "permanent",
    "Transient": "transient",
    "Undetermined": "undetermined",
}


class Refused(Exception):
    """A message that did not prove itself; nothing was done."""


def message_of(body: bytes) -> dict[str, str]:
    """The SNS message `body` holds: its string fields, or Refused."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Refused("not JSON") from None
    if not isinstance(parsed, dict) or parsed.get("Type") not in _TYPES:
        raise Refused("not an SNS message")
    if not all(isinstance(v, str) for v in parsed.values()):
        raise Refused("an SNS message has only string fields")
    return parsed


def certificate_url_allowed(url: str, trusted: Sequence[str]) -> bool:
    """An SNS host over https, a .pem path and no query; or a trusted prefix."""
    parts = _on_sns_host(url)
    return _trusted(url, trusted) or (
        parts is not None and parts.path.endswith(".pem") and not parts.query
    )


def subscribe_url_allowed(url: str, trusted: Sequence[str]) -> bool:
    """A subscription's confirmation URL: https on an SNS host, ConfirmSubscription; or a
    trusted prefix."""
    parts = _on_sns_host(url)
    return _trusted(url, trusted) or (
        parts is not None and "Action=ConfirmSubscription" in parts.query
    )


def _trusted(url: str, trusted: Sequence[str]) -> bool:
    return any(url == t or url.startswith(t.rstrip("/") + "/") for t in trusted)


def _on_sns_host(url: str) -> SplitResult | None:
    """`url`'s parts when it is https on an SNS host with no credentials or odd port, else
    None (a port that is no number is refused, not raised: the sender is a stranger)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    if (
        parts.scheme == "https"
        and parts.username is None
        and port in (None, 443)
        and _SNS_HOST.fullmatch(parts.hostname or "") is not None
    ):
        return parts
    return None


def string_to_sign(message: Mapping[str, str]) -> bytes:
    """SNS's canonical form of a message: its signed fields, name and value per line."""
    if message["Type"] == "Notification":
        names = ["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"]
    else:
        names = ["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"]
    lines = []
    for name in names:
        if name == "Subject" and "Subject" not in message:
            continue
        if name not in message:
            raise Refused(f"no {name}")
        lines += [name, message[name]]
    return ("\n".join(lines) + "\n").encode()


def signature_holds(message: Mapping[str, str], certificate_pem: bytes) -> bool:
    """Whether a SignatureVersion 2 signature (RSA PKCS#1 v1.5, SHA-256) holds."""
    if message.get("SignatureVersion") != "2":
        return False
    try:
        public_key = x509.load_pem_x509_certificate(certificate_pem).public_key()
        signature = base64.b64decode(message.get("Signature", ""), validate=True)
    except ValueError:
        return False
    if not isinstance(public_key, rsa.RSAPublicKey):
        return False
    try:
        public_key.verify(signature, string_to_sign(message), padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


def fresh(message: Mapping[str, str], now: datetime | None = None) -> bool:
    try:
        at = datetime.fromisoformat(message.get("Timestamp", "").replace("Z", "+00:00"))
    except ValueError:
        return False
    now = now or datetime.now(UTC)
    return at.tzinfo is not None and now - MAX_AGE <= at <= now + timedelta(minutes=5)


class Certificates:
    """Signing certificates by URL, fetched once each (the newest few kept)."""

    def __init__(self) -> None:
        self._cache: dict[str, bytes] = {}

    async def get(self, url: str) -> bytes:
        if url in self._cache:
            return self._cache[url]
        pem = await fetch(url, MAX_CERTIFICATE_BYTES)
        if len(self._cache) >= _CACHED_CERTIFICATES:
            self._cache.pop(next(iter(self._cache)))
        self._cache[url] = pem
        return pem


async def fetch(url: str, limit: int) -> bytes:
    """GET `url` (already checked), at most `limit` bytes, within FETCH_TIMEOUT_SECONDS."""
    timeouts = {k: FETCH_TIMEOUT_SECONDS for k in ("connect", "read", "write", "pool")}
    async with (
        httpcore.AsyncConnectionPool() as pool,
        pool.stream("GET", url, extensions={"timeout": timeouts}) as response,
    ):
        if response.status != 200:
            raise Refused(f"{url} answered {response.status}")
        body = b""
        async for chunk in response.aiter_stream():
            body += chunk
            if len(body) > limit:
                raise Refused(f"{url} sent more than {limit} bytes")
    return body


def event_of(message: Mapping[str, str]) -> dict[str, Any]:
    """The SES event an SNS notification carries ({} when it is none)."""
    try:
        event = orjson.loads(message["Message"])
    except orjson.JSONDecodeError:
        return {}
    return event if isinstance(event, dict) else {}


def delivery_named(
    event: Mapping[str, Any], keys: TokenKeys, bounce_domain: str | None
) -> tuple[int | None, str | None]:
    """Which delivery an SES event is about: the outbox id its envelope sender (a return
    path of ours) names, else the Message-ID header it names (to look up)."""
    mail = event.get("mail")
    mail = mail if isinstance(mail, dict) else {}
    if bounce_domain is not None:
        outbox_id = verp.outbox_of(keys, str(mail.get("source", ""))[:400], bounce_domain)
        if outbox_id is not None:
            return outbox_id, None
    headers = mail.get("commonHeaders")
    headers = headers if isinstance(headers, dict) else {}
    message_id = str(headers.get("messageId", "")).strip()[:255]
    return None, message_id or None


def reports_of(event: Mapping[str, Any], sns_id: str, outbox_id: int) -> list[Report]:
    """The normalised reports an SES event holds about delivery `outbox_id`."""
    kind = event.get("notificationType") or event.get("eventType")
    base = "sns:" + sns_id[:100]
    bounce = event.get("bounce")
    if kind == "Bounce" and isinstance(bounce, dict):
        bounce_type = _BOUNCE_TYPES.get(str(bounce.get("bounceType")), "undetermined")
        recipients = bounce.get("bouncedRecipients")
        found = []
        for n, recipient in enumerate(recipients[:10] if isinstance(recipients, list) else []):
            recipient = recipient if isinstance(recipient, dict) else {}
            status = str(recipient.get("status", ""))
            found.append(
                Report(
                    outbox_id,
                    f"{base}#{n}",
                    "bounced",
                    "ses",
                    bounce_type=bounce_type,
                    status=status if _STATUS.fullmatch(status) else None,
                    diagnostic=diagnostic_of(str(recipient.get("diagnosticCode", ""))) or None,
                )
            )
        return found or [Report(outbox_id, base, "bounced", "ses", bounce_type=bounce_type)]
    if kind == "Complaint":
        return [Report(outbox_id, base, "complained", "ses")]
    if kind == "Delivery":
        return [Report(outbox_id, base, "delivered", "ses")]
    return []


__all__ = [
    "Certificates",
    "Refused",
    "certificate_url_allowed",
    "delivery_named",
    "event_of",
    "fetch",
    "fresh",
    "message_of",
    "reports_of",
    "signature_holds",
    "string_to_sign",
    "subscribe_url_allowed",
]
