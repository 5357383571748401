"""Verifications: requesting one inside the caller's transaction, confirming its token.

`request_verification` is the library call and the API's implementation alike: it validates
the request, honours the idempotency key, enforces suppression and resend throttling, writes
the verification and its outbox row in one statement, and supersedes earlier unverified
verifications for the same recipient, all inside one transaction on the caller's connection.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson
from email_validator import EmailNotValidError, validate_email

from notifier.config import RequestSettings, SmtpSettings, TokenSettings, WorkerSettings
from notifier.errors import NotifierError
from notifier.locales import normalize_locale
from notifier.queries import sql
from notifier.telemetry import inject_current, producer_span
from notifier.tokens import IssuedToken, TokenKeys, hash_token, looks_like_token

DeliveryStatus = Literal["pending", "sending", "sent", "failed", "expired"]
# "ready": a live link seen without confirming it (GET /verify shows the Confirm button).
ConfirmOutcome = Literal["verified", "already_verified", "expired", "invalid", "ready"]

USER_ID_MAX_CHARS = 200
IDEMPOTENCY_KEY_MAX_CHARS = 255
_PURPOSE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
# Printable ASCII without spaces: keys travel in headers and logs.
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")


class RequestError(NotifierError):
    """A verification request that cannot be carried out; nothing was written."""

    code = "invalid_request"


class InvalidRequest(RequestError):
    """A field of the request is malformed."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class IdempotencyConflict(RequestError):
    """The idempotency key was already used for a different request."""

    code = "idempotency_conflict"

    def __init__(self) -> None:
        super().__init__(
            "this Idempotency-Key was already used with a different request body; "
            "use a new key for a new request"
        )


class Throttled(RequestError):
    """Too many verifications for this user or address in the resend window."""

    code = "throttled"

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            f"too many verification emails for this user or address; try again in {retry_after}s"
        )
        self.retry_after = retry_after


class Suppressed(RequestError):
    """The address failed permanently before and is suppressed until an operator clears it."""

    code = "email_suppressed"

    def __init__(self) -> None:
        super().__init__(
            "the mail server permanently refused this address before, so no more mail is "
            "sent to it until an operator clears it (notifier suppressions clear ADDRESS)"
        )


@dataclass(frozen=True, slots=True)
class Policy:
    """The rules a request is held to, and what each new verification is given."""

    keys: TokenKeys
    # NOTIFIER_TOKEN_TTL: seconds a link stays valid.
    ttl_seconds: float
    # NOTIFIER_MAX_ATTEMPTS: stored on each new outbox row.
    max_attempts: int
    # The Message-ID domain (NOTIFIER_MESSAGE_ID_DOMAIN, else the From address's domain).
    message_id_domain: str
    # RequestSettings: idempotency-key lifetime and the resend limit per user and address.
    idempotency_ttl: float = 86400.0
    resend_limit: int = 5
    resend_window: float = 3600.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Policy:
        env = os.environ if env is None else env
        return cls.from_settings(
            TokenSettings.from_env(env),
            RequestSettings.from_env(env),
            max_attempts=WorkerSettings.from_env(env).max_attempts,
            message_id_domain=SmtpSettings.from_env(env).id_domain,
        )

    @classmethod
    def from_settings(
        cls,
        tokens: TokenSettings,
        limits: RequestSettings,
        *,
        max_attempts: int,
        message_id_domain: str,
    ) -> Policy:
        return cls(
            keys=TokenKeys(tokens.secrets),
            ttl_seconds=tokens.ttl_seconds,
            max_attempts=max_attempts,
            message_id_domain=message_id_domain,
            idempotency_ttl=limits.idempotency_ttl,
            resend_limit=limits.resend_limit,
            resend_window=limits.resend_window,
        )


@dataclass(frozen=True, slots=True)
class VerificationRequest:
    """A validated request: what a verification is for and where it goes."""

    user_id: str
    email: str
    purpose: str = "signup"
    # The language the email is written in (a normalised tag); None: English.
    locale: str | None = None

    @classmethod
    def parse(
        cls, user_id: str, email: str, purpose: str | None = None, locale: str | None = None
    ) -> VerificationRequest:
        return cls(
            _user_id(user_id),
            normalize_email(email),
            _purpose(purpose or "signup"),
            _locale(locale) if locale is not None else None,
        )

    def fingerprint(self) -> bytes:
        """Identifies the body an idempotency key was first used with."""
        fields = [self.user_id, self.email, self.purpose]
        if self.locale is not None:
            # Appended only when given, so requests without one keep their fingerprints.
            fields.append(self.locale)
        return hashlib.sha256(orjson.dumps(fields)).digest()


@dataclass(frozen=True, slots=True)
class VerificationResult:
    """What a request returns: the API's 202 body, and the library call's result."""

    id: uuid.UUID
    status: DeliveryStatus
    expires_at: datetime
    replayed: bool = False


def normalize_email(raw: str) -> str:
    """The address as stored and compared: validated, domain normalised."""
    if not isinstance(raw, str) or any(c in raw for c in "\r\n\x00"):
        raise InvalidRequest("email", "must be a single-line email address")
    try:
        checked = validate_email(raw, check_deliverability=False)
    except EmailNotValidError as exc:
        raise InvalidRequest("email", str(exc)) from exc
    return str(checked.normalized)


def _user_id(raw: str) -> str:
    if not isinstance(raw, str) or not 1 <= len(raw) <= USER_ID_MAX_CHARS:
        raise InvalidRequest("user_id", f"must be 1 to {USER_ID_MAX_CHARS} characters")
    if not raw.isprintable():
        raise InvalidRequest("user_id", "must not contain control characters or line breaks")
    return raw


def _purpose(raw: str) -> str:
    if not isinstance(raw, str) or not _PURPOSE.fullmatch(raw):
        raise InvalidRequest(
            "purpose", "must be lowercase letters, digits, '_', '.' or '-', starting with a letter"
        )
    return raw


def _locale(raw: str) -> str:
    try:
        return normalize_locale(raw)
    except ValueError as exc:
        raise InvalidRequest("locale", str(exc)) from exc


def check_idempotency_key(raw: str) -> str:
    if not _IDEMPOTENCY_KEY.fullmatch(raw):
        raise InvalidRequest(
            "Idempotency-Key", "must be 1 to 255 printable ASCII characters without spaces"
        )
    return raw


def message_id_for(verification_id: uuid.UUID, domain: str) -> str:
    """The delivery's Message-ID: fixed at enqueue and the same on every attempt (invariant 6)."""
    return f"<verify.{verification_id}@{domain}>"


async def request_verification(
    conn: Any,
    *,
    user_id: str,
    email: str,
    purpose: str | None = None,
    idempotency_key: str | None = None,
    policy: Policy | None = None,
    traceparent: str | None = None,
    tracestate: str | None = None,
    locale: str | None = None,
) -> VerificationResult:
    """Request a verification email, inside the caller's transaction on `conn`.

    Nothing is sent unless that transaction commits: the worker is notified at COMMIT, and a
    rollback leaves nothing behind. Raises InvalidRequest, IdempotencyConflict, Throttled or
    Suppressed without writing anything. `policy` defaults to one read from the environment.
    `locale` (a language tag such as "de" or "pt-BR") picks the email's language; the
    closest one there are templates for is used, English by default.
    """
    request = VerificationRequest.parse(user_id, email, purpose, locale)
    if idempotency_key is not None:
        check_idempotency_key(idempotency_key)
    policy = policy or _env_policy()
    # A savepoint inside the caller's transaction, or a transaction of its own.
    async with conn.transaction():
        await conn.execute(sql("lock_request"), idempotency_key, request.user_id, request.email)
        if idempotency_key is not None:
            await conn.execute(
                sql("forget_expired_idempotency_key"), idempotency_key, policy.idempotency_ttl
            )
            replay = await _replay(conn, idempotency_key, request)
            if replay is not None:
                return replay
        if await conn.fetchrow(sql("suppression_of"), request.email) is not None:
            raise Suppressed()
        retry_after = await conn.fetchval(
            sql("throttle_retry_after"),
            request.user_id,
            request.email,
            policy.resend_window,
            policy.resend_limit,
        )
        if retry_after is not None:
            raise Throttled(max(int(retry_after), 1))
        verification_id = uuid.uuid4()
        issued = policy.keys.issue(verification_id)
        with producer_span() as span:
            if traceparent is None:
                traceparent, tracestate = inject_current()
            row = await _insert(
                conn,
                policy,
                request,
                verification_id,
                issued,
                traceparent,
                tracestate,
                idempotency_key,
            )
            if span is not None and row is not None:
                span.set_attribute("messaging.message.id", str(row["outbox_id"]))
                span.set_attribute("notifier.verification_id", str(row["id"]))
        if row is None:
            # Unreachable while the key lock is held; kept so a missing lock fails loudly.
            raise RuntimeError("idempotency key taken despite its lock")
        await conn.execute(
            sql("supersede_earlier"), request.user_id, request.email, request.purpose, row["id"]
        )
    return VerificationResult(row["id"], "pending", row["expires_at"])


async def _insert(
    conn: Any,
    policy: Policy,
    request: VerificationRequest,
    verification_id: uuid.UUID,
    issued: IssuedToken,
    traceparent: str | None,
    tracestate: str | None,
    idempotency_key: str | None,
) -> Any:
    return await conn.fetchrow(
        sql("insert_verification"),
        verification_id,
        request.user_id,
        request.email,
        request.purpose,
        issued.key_id,
        issued.nonce,
        issued.token_hash,
        policy.ttl_seconds,
        message_id_for(verification_id, policy.message_id_domain),
        policy.max_attempts,
        traceparent,
        tracestate,
        idempotency_key,
        request.fingerprint() if idempotency_key is not None else None,
        request.locale,
    )


async def _replay(conn: Any, key: str, request: VerificationRequest) -> VerificationResult | None:
    existing = await conn.fetchrow(sql("find_by_idempotency_key"), key)
    if existing is None:
        return None
    if bytes(existing["request_fingerprint"]) != request.fingerprint():
        raise IdempotencyConflict()
    return VerificationResult(existing["id"], existing["status"], existing["expires_at"], True)


_cached_policy: Policy | None = None


def _env_policy() -> Policy:
    global _cached_policy
    if _cached_policy is None:
        _cached_policy = Policy.from_env()
    return _cached_policy


# -- confirming ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Confirmation:
    """What following a link did (or, for a GET, would do)."""

    outcome: ConfirmOutcome
    verification_id: uuid.UUID | None = None
    # Set when the link was replaced by a newer one (its outcome is "invalid").
    superseded: bool = False
    # The verification's recipient, to offer a fresh link when this one expired.
    user_id: str | None = None
    email: str | None = None
    purpose: str | None = None
    locale: str | None = None


async def confirm(conn: Any, token: str, *, apply: bool) -> Confirmation:
    """Confirm `token` (apply=True), or only say what confirming would do (apply=False).

    The token is looked up by its hash; the raw token is never stored, logged or returned.
    """
    if not isinstance(token, str) or not looks_like_token(token):
        return Confirmation("invalid")
    token_hash = hash_token(token)
    row = await conn.fetchrow(sql("confirm_token" if apply else "token_state"), token_hash)
    if row is None or not hmac.compare_digest(bytes(row["token_hash"]), token_hash):
        return Confirmation("invalid")
    recipient = {
        "user_id": row["user_id"],
        "email": row["email"],
        "purpose": row["purpose"],
        "locale": row["locale"],
    }
    if row["confirmed_now"]:
        return Confirmation("verified", row["id"], **recipient)
    if row["verified_at"] is not None:
        return Confirmation("already_verified", row["id"], **recipient)
    if row["superseded_at"] is not None:
        return Confirmation("invalid", row["id"], superseded=True, **recipient)
    if row["expired"]:
        return Confirmation("expired", row["id"], **recipient)
    return Confirmation("ready", row["id"], **recipient)
