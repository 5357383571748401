"""Standard Webhooks v1 signatures, and the endpoints' secrets they are made with.

A request carries `webhook-id` (the event's id, the same on every retry), `webhook-timestamp`
(Unix seconds of this attempt) and `webhook-signature`: `v1,<base64 HMAC-SHA256 of
"{id}.{timestamp}.{body}">`, several separated by spaces while a rotated-out secret still
signs (the spec's own libraries accept any one that matches).

An endpoint's secret is never stored: it is derived from one of NOTIFIER_TOKEN_SECRET's
secrets (named by its key id) and a random nonce kept on the endpoint's row, so a dump of the
database cannot sign a webhook. Shown once as `whsec_` and its base64, as the spec writes it.
Removing that token secret from NOTIFIER_TOKEN_SECRET voids the webhook secrets made with it
(rotate each endpoint first).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from notifier.tokens import TokenKeys

PREFIX = "whsec_"
NONCE_BYTES = 32
_CONTEXT = b"notifier.webhook-secret.v1"


@dataclass(frozen=True, slots=True)
class SecretRef:
    """What an endpoint's row keeps of one of its secrets."""

    key_id: str
    nonce: bytes

    @classmethod
    def new(cls, keys: TokenKeys) -> SecretRef:
        return cls(keys.current_key_id, secrets.token_bytes(NONCE_BYTES))


def secret_of(keys: TokenKeys, endpoint_id: uuid.UUID, ref: SecretRef) -> bytes:
    """The 32 secret bytes (UnknownKeyError once its token secret is no longer configured)."""
    return keys.derived_key(ref.key_id, _CONTEXT, endpoint_id.bytes + ref.nonce)


def shown(secret: bytes) -> str:
    """The secret as a receiver configures it: `whsec_` and its base64."""
    return PREFIX + base64.b64encode(secret).decode()


def sign(secret: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(
    message_id: str, timestamp: int, body: bytes, signing: Sequence[bytes]
) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt, signed with every secret in `signing`."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(sign(s, message_id, timestamp, body) for s in signing),
    }
