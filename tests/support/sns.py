"""SNS as a test plays it: a signing key and certificate, messages signed as SNS signs them
(SignatureVersion 2), and a loopback HTTP server that serves the certificate and answers a
subscription's confirmation, recording every request."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from notifier.web.ses import string_to_sign

TOPIC = "arn:aws:sns:eu-west-1:123456789012:ses-notifications"


@dataclass
class Signer:
    key: rsa.RSAPrivateKey
    certificate_pem: bytes

    @classmethod
    def new(cls) -> Signer:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.test")])
        now = datetime.now(UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256())
        )
        return cls(key, certificate.public_bytes(serialization.Encoding.PEM))

    def sign(self, message: dict[str, str]) -> dict[str, str]:
        signature = self.key.sign(string_to_sign(message), padding.PKCS1v15(), hashes.SHA256())
        return {
            **message,
            "SignatureVersion": "2",
            "Signature": base64.b64encode(signature).decode(),
        }


def notification(
    event: dict[str, Any], cert_url: str, topic: str = TOPIC, **extra: str
) -> dict[str, str]:
    return {
        "Type": "Notification",
        "MessageId": str(uuid.uuid4()),
        "TopicArn": topic,
        "Message": orjson.dumps(event).decode(),
        "Timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "SigningCertURL": cert_url,
        **extra,
    }


def bounce_event(source: str, message_id: str, status: str = "5.1.1") -> dict[str, Any]:
    return {
        "notificationType": "Bounce",
        "bounce": {
            "bounceType": "Permanent",
            "bounceSubType": "General",
            "bouncedRecipients": [
                {
                    "emailAddress": "ada@example.org",
                    "status": status,
                    "diagnosticCode": "smtp; 550 5.1.1 user unknown",
                }
            ],
        },
        "mail": {"source": source, "commonHeaders": {"messageId": message_id}},
    }


@dataclass
class CertificateServer:
    """Serves `pem` for any GET; `requests` holds every request line it was sent."""

    pem: bytes
    requests: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = (await reader.readline()).decode(errors="replace").strip()
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        self.requests.append(request)
        body = self.pem if ".pem" in request else b"<ConfirmSubscriptionResponse/>"
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )
        await writer.drain()
        writer.close()


@asynccontextmanager
async def certificate_server(pem: bytes) -> AsyncIterator[CertificateServer]:
    served = CertificateServer(pem)
    server = await asyncio.start_server(served._serve, "127.0.0.1", 0)
    served.port = int(server.sockets[0].getsockname()[1])
    try:
        yield served
    finally:
        server.close()
        await server.wait_closed()
