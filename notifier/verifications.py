"""Verifications: requesting one inside the caller's transaction, confirming its token.

`request_verification` is the library call and the API's implementation alike: it validates
the request, honours the idempotency key, enforces suppression and resend throttling, writes
the verification and its outbox row in one statement, and supersedes earlier unverified
verifications for the same recipient, all inside one transaction on the caller's connection.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from notifier import addresses
from notifier.addresses import Address
from notifier.config import (
    RequestSettings,
    RetentionSettings,
    SmtpSettings,
    TokenSettings,
)
from notifier.errors import NotifierError
from notifier.locales import normalize_locale
from notifier.outcomes import ConfirmOutcome, DeliveryStatus
from notifier.queries import sql
from notifier.settings_spec import value_of
from notifier.telemetry import inject_current, producer_span
from notifier.tokens import TokenKeys, hash_token, looks_like_token

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


ThrottleLimit = Literal["user", "mailbox", "domain", "client", "global"]
_THROTTLE_SUBJECTS: dict[str, str] = {
    "user": "this user",
    "mailbox": "this mailbox (its spellings and +tags count as one)",
    "domain": "this address's domain",
    "client": "this API key",
    "global": "this service",
}


class Throttled(RequestError):
    """A limit on verification emails was reached: which one, and when one more fits."""

    code = "throttled"

    def __init__(self, retry_after: int, limit: ThrottleLimit = "mailbox") -> None:
        super().__init__(
            f"too many verification emails for {_THROTTLE_SUBJECTS[limit]} "
            f"({limit} limit); try again in {retry_after}s"
        )
        self.retry_after = retry_after
        self.limit = limit


class Suppressed(RequestError):
    """The recipient's server refused this mailbox for good; it is suppressed for a while."""

    code = "email_suppressed"

    def __init__(self) -> None:
        super().__init__(
            "the recipient's mail server refused this mailbox permanently (unknown, disabled "
            "or full), so no mail is sent to it until the suppression expires or an operator "
            "clears it (notifier suppressions clear ADDRESS)"
        )


@dataclass(frozen=True, slots=True)
class Policy:
    """The rules a request is held to, and what each new verification is given."""

    keys: TokenKeys
    # NOTIFIER_TOKEN_TTL: seconds a link stays valid.
    ttl_seconds: float
    # The Message-ID domain (NOTIFIER_MESSAGE_ID_DOMAIN, else the From address's domain).
    message_id_domain: str
    # Idempotency-key lifetime, the limits and how mailboxes are told apart.
    limits: RequestSettings = field(default_factory=RequestSettings)
    # NOTIFIER_SCRUB_AFTER: an expired link older than this asks for a fresh start, not a
    # fresh link (its address is, or is about to be, scrubbed).
    resend_horizon: float = RetentionSettings().scrub_after

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Policy:
        """The policy the environment configures, reading only the settings it uses."""
        return cls.from_settings(
            TokenSettings.from_env(env),
            RequestSettings.from_env(env),
            message_id_domain=value_of(SmtpSettings, "message_id_domain", env)
            or value_of(SmtpSettings, "mail_from", env).rpartition("@")[2],
            resend_horizon=value_of(RetentionSettings, "scrub_after", env),
        )

    @classmethod
    def from_settings(
        cls,
        tokens: TokenSettings,
        limits: RequestSettings,
        *,
        message_id_domain: str,
        resend_horizon: float = RetentionSettings().scrub_after,
    ) -> Policy:
        return cls(
            keys=TokenKeys(tokens.secrets),
            ttl_seconds=tokens.ttl_seconds,
            message_id_domain=message_id_domain,
            limits=limits,
            resend_horizon=resend_horizon,
        )


@dataclass(frozen=True, slots=True)
class VerificationRequest:
    """A validated request: what a verification is for and where it goes."""

    user_id: str
    address: Address
    purpose: str = "signup"
    # The language the email is written in (a normalised tag); None: English.
    locale: str | None = None

    @classmethod
    def parse(
        cls,
        user_id: str,
        email: str,
        purpose: str | None,
        separators: str,
        locale: str | None = None,
    ) -> VerificationRequest:
        try:
            address = addresses.parse(email, separators)
        except addresses.InvalidAddress as exc:
            raise InvalidRequest("email", str(exc)) from exc
        return cls(
            _user_id(user_id),
            address,
            _purpose(purpose or "signup"),
            _locale(locale) if locale is not None else None,
        )

    @property
    def email(self) -> str:
        return self.address.display

    def _body(self) -> bytes:
        fields = [self.user_id, self.email, self.purpose]
        if self.locale is not None:
            # Appended only when given, so requests without one keep their fingerprints.
            fields.append(self.locale)
        return orjson.dumps(fields)

    def fingerprint(self, keys: TokenKeys) -> bytes:
        """Identifies the body an idempotency key was first used with. Keyed (HMAC under the
        server secret): a dump of the table cannot be checked against guessed addresses."""
        return keys.digest(_FINGERPRINT_CONTEXT, self._body())

    def fingerprints(self, keys: TokenKeys) -> list[bytes]:
        """The fingerprint under every configured secret: a key used before a rotation still
        replays while its secret is kept."""
        return keys.digests(_FINGERPRINT_CONTEXT, self._body())


_FINGERPRINT_CONTEXT = b"notifier.request-fingerprint.v1"
_BUDGET_CONTEXT = b"notifier.request-budget.v1"
# Budgets are counted in this many slices of the window: a request leaves the count up to
# a sixtieth of the window early (a minute of an hour), never late.
BUDGET_SLICES = 60


@dataclass(frozen=True, slots=True)
class VerificationResult:
    """What a request returns: the API's 202 body, and the library call's result."""

    id: uuid.UUID
    status: DeliveryStatus
    expires_at: datetime
    replayed: bool = False


def normalize_email(raw: str, separators: str = "+") -> str:
    """The canonical mailbox of an address (what suppressions and limits are keyed by)."""
    try:
        return addresses.parse(raw, separators).mailbox
    except addresses.InvalidAddress as exc:
        raise InvalidRequest("email", str(exc)) from exc


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
    client_id: str | None = None,
    locale: str | None = None,
    replaces: uuid.UUID | None = None,
) -> VerificationResult:
    """Request a verification email, inside the caller's transaction on `conn`.

    Nothing is sent unless that transaction commits: the worker is notified at COMMIT, and a
    rollback leaves nothing behind. Raises InvalidRequest, IdempotencyConflict, Throttled or
    Suppressed without writing anything. `policy` defaults to one read from the environment.
    `locale` (a language tag such as "de" or "pt-BR") picks the email's language; the
    closest one there are templates for is used, English by default.
    `client_id` is the API key that asked (None: the application's own code); idempotency
    keys are scoped to it, so two clients using the same key never collide, and a request
    supersedes only that client's earlier verifications of the recipient, and `replaces`
    (a console resend: a support key replacing the app's failed verification).
    """
    policy = policy or _env_policy()
    limits = policy.limits
    request = VerificationRequest.parse(
        user_id, email, purpose, limits.subaddress_separators, locale
    )
    if idempotency_key is not None:
        check_idempotency_key(idempotency_key)
    budgets = _Budgets.of(policy, request, client_id)
    verification_id = uuid.uuid4()
    issued = policy.keys.issue(verification_id)
    with producer_span() as span:
        if traceparent is None:
            traceparent, tracestate = inject_current()
        # One statement (schema request_v3): one round trip in the caller's transaction, or
        # one that commits by itself; a refusal comes back as a row and writes nothing.
        row = await conn.fetchrow(
            sql("request_verification"),
            verification_id,
            request.user_id,
            request.email,
            request.address.mailbox,
            request.address.folded,
            request.purpose,
            request.locale,
            issued.key_id,
            issued.nonce,
            issued.token_hash,
            policy.ttl_seconds,
            message_id_for(verification_id, policy.message_id_domain),
            limits.max_attempts,
            traceparent,
            tracestate,
            idempotency_key,
            request.fingerprint(policy.keys),
            request.fingerprints(policy.keys),
            limits.idempotency_ttl,
            client_id,
            limits.resend_limit,
            limits.resend_window,
            budgets.scopes,
            budgets.subjects,
            budgets.limits,
            budgets.slice_seconds,
            replaces,
        )
        if span is not None:
            span.set_attribute("notifier.request.result", row["result"])
            if row["result"] == "accepted":
                span.set_attribute("messaging.message.id", str(row["outbox_id"]))
                span.set_attribute("notifier.verification_id", str(row["id"]))
    return _answer(row)


def _answer(row: Any) -> VerificationResult:
    """What request_v3's row means: a result, or the refusal raised as its error."""
    match row["result"]:
        case "accepted":
            return VerificationResult(row["id"], "pending", row["expires_at"])
        case "replayed":
            return VerificationResult(row["id"], row["status"], row["expires_at"], True)
        case "conflict":
            raise IdempotencyConflict()
        case "suppressed":
            raise Suppressed()
        case "throttled":
            raise Throttled(row["retry_after"], row["limit_scope"])
        case unknown:
            raise RuntimeError(f"request_v3 answered {unknown!r}")


@dataclass(frozen=True, slots=True)
class _Budgets:
    """The shared budgets (domain, client, global) one request counts against.

    The domain budget is each client's own (one client's traffic, or a bot driving it,
    never refuses another client's users) and is not kept for the shared providers'
    domains (RequestSettings.shared_domains), where it would refuse real users of that
    provider rather than protect anyone: it guards one organisation's domain from being
    bombed through one client.
    """

    scopes: list[str]
    subjects: list[bytes]
    limits: list[int]
    slice_seconds: float

    @classmethod
    def of(cls, policy: Policy, request: VerificationRequest, client_id: str | None) -> _Budgets:
        limits = policy.limits
        domain = request.address.domain
        wanted = [
            (
                "domain",
                None if domain in limits.shared_domains else f"{client_id or ''}:{domain}",
                limits.domain_limit,
            ),
            ("client", client_id, limits.client_limit),
            ("global", "", limits.global_limit),
        ]
        chosen = [(s, v, n) for s, v, n in wanted if v is not None and n > 0]
        return cls(
            scopes=[s for s, _, _ in chosen],
            # Keyed, so the counters hold no domain or client in the clear.
            subjects=[
                b"" if s == "global" else policy.keys.digest(_BUDGET_CONTEXT, f"{s}:{v}".encode())
                for s, v, _ in chosen
            ],
            limits=[n for _, _, n in chosen],
            slice_seconds=limits.resend_window / BUDGET_SLICES,
        )


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
    # Set when the link was replaced by a newer one (its outcome is "invalid"), and by which.
    superseded: bool = False
    superseded_by: uuid.UUID | None = None
    # The verification's recipient, to offer a fresh link when this one expired.
    user_id: str | None = None
    email: str | None = None
    purpose: str | None = None
    locale: str | None = None
    # The client that requested it: a fresh link from its page counts against that client.
    client_id: str | None = None
    # When it expired (None: it has not); a link long expired cannot be renewed.
    expired_at: datetime | None = None
    # Its address was scrubbed (retention): nothing can be sent for it again.
    scrubbed: bool = False
    # The user is verified for this purpose already (by this client, with another link).
    user_verified: bool = False
    # The client that requested it still has a valid key (always, for the library call).
    client_valid: bool = True
    # What replaced it is the fresh link this very link asked for.
    renewed_here: bool = False

    def renewable(self, horizon: float) -> bool:
        """Whether its page may send one fresh link: only an expired link, never replaced
        (a link renews once, for good, and a replaced link is no longer the user's), of a
        user not verified yet, whose client's key is still valid, that expired less than
        `horizon` seconds ago, with its address still there."""
        return (
            self.outcome == "expired"
            and not self.superseded
            and not self.user_verified
            and self.client_valid
            and not self.scrubbed
            and self.user_id is not None
            and self.email is not None
            and self.expired_at is not None
            and (datetime.now(UTC) - self.expired_at).total_seconds() < horizon
        )


def resend_key(token: str) -> str:
    """The idempotency key of the fresh link `token`'s page asks for: one per link."""
    return "resend:" + hashlib.sha256(token.encode()).hexdigest()[:40]


async def confirm(conn: Any, token: str, *, apply: bool, keys: TokenKeys) -> Confirmation:
    """Confirm `token` (apply=True), or only say what confirming would do (apply=False).

    The token is looked up by its hash; the raw token is never stored, logged or returned.
    A token made with a secret no longer in `keys` is invalid: removing a secret revokes
    its links. A confirm racing another confirm of the same link answers "already
    verified" (confirm_v1 reads the state after the other one committed).
    """
    if not isinstance(token, str) or not looks_like_token(token) or not keys.knows(token):
        return Confirmation("invalid")
    token_hash = hash_token(token)
    row = await conn.fetchrow(sql("confirm_token"), token_hash, apply)
    if row is None or not hmac.compare_digest(bytes(row["token_hash"]), token_hash):
        return Confirmation("invalid")
    recipient = {
        "user_id": row["user_id"],
        "email": row["email"],
        "purpose": row["purpose"],
        "locale": row["locale"],
        "client_id": row["client_id"],
        "expired_at": row["expires_at"] if row["expired"] else None,
        "scrubbed": row["scrubbed_at"] is not None,
        "user_verified": row["user_verified"],
        "client_valid": row["client_valid"],
    }
    if row["confirmed_now"]:
        return Confirmation("verified", row["id"], **recipient)
    if row["verified_at"] is not None:
        return Confirmation("already_verified", row["id"], **recipient)
    if row["superseded_at"] is not None:
        return Confirmation(
            "invalid",
            row["id"],
            superseded=True,
            superseded_by=row["superseded_by"],
            renewed_here=row["successor_key"] == resend_key(token),
            **recipient,
        )
    if row["expired"]:
        return Confirmation("expired", row["id"], **recipient)
    return Confirmation("ready", row["id"], **recipient)
