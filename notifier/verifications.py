"""Verifications: what a request must be, what it is given, and what its answers mean.

A request is validated here (user id, address, purpose, locale, idempotency key), its
policy decides the limits and what each new verification gets (token material, lifetime,
Message-ID), and its results and refusals are the types every caller sees. The statements
that write and read them are in notifier.storage.outbox.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, get_args

import orjson

from notifier import addresses
from notifier.addresses import Address
from notifier.config import (
    CodeSettings,
    RequestSettings,
    RetentionSettings,
    SmtpSettings,
    TokenSettings,
)
from notifier.errors import NotifierError
from notifier.locales import normalize_locale
from notifier.outcomes import CodeLock, CodeOutcome, ConfirmOutcome, DeliveryStatus, Method
from notifier.settings_spec import value_of
from notifier.tokens import TokenKeys

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


class NotInTransaction(NotifierError):
    """The library call was made outside a transaction, where the outbox cannot keep its
    promise (the verification exists only if the caller's own work commits); nothing was
    written."""

    def __init__(self) -> None:
        super().__init__(
            "request_verification must run inside the caller's transaction, so that the "
            "verification and its email exist only if the caller's own work commits: begin "
            "one first (asyncpg: `async with conn.transaction()`; psycopg: autocommit off, or "
            "`with conn.transaction()`; SQLAlchemy: a Connection or Session not set to "
            "AUTOCOMMIT; Django: inside `transaction.atomic()`). Nothing was written."
        )


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
    # The default method, and the codes' length, lifetime and limits.
    codes: CodeSettings = field(default_factory=CodeSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Policy:
        """The policy the environment configures, reading only the settings it uses."""
        return cls.from_settings(
            TokenSettings.from_env(env),
            RequestSettings.from_env(env),
            message_id_domain=value_of(SmtpSettings, "message_id_domain", env)
            or value_of(SmtpSettings, "mail_from", env).rpartition("@")[2],
            resend_horizon=value_of(RetentionSettings, "scrub_after", env),
            codes=CodeSettings.from_env(env),
        )

    @classmethod
    def from_settings(
        cls,
        tokens: TokenSettings,
        limits: RequestSettings,
        *,
        message_id_domain: str,
        resend_horizon: float = RetentionSettings().scrub_after,
        codes: CodeSettings | None = None,
    ) -> Policy:
        return cls(
            keys=TokenKeys(tokens.secrets),
            ttl_seconds=tokens.ttl_seconds,
            message_id_domain=message_id_domain,
            limits=limits,
            resend_horizon=resend_horizon,
            codes=CodeSettings() if codes is None else codes,
        )


@dataclass(frozen=True, slots=True)
class VerificationRequest:
    """A validated request: what a verification is for and where it goes."""

    user_id: str
    address: Address
    purpose: str = "signup"
    # The language the email is written in (a normalised tag); None: English.
    locale: str | None = None
    # How it is confirmed: by link, by code, or either.
    method: Method = "link"

    @classmethod
    def parse(
        cls,
        user_id: str,
        email: str,
        purpose: str | None,
        separators: str,
        locale: str | None = None,
        method: str = "link",
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
            _method(method),
        )

    @property
    def email(self) -> str:
        return self.address.display

    def _body(self) -> bytes:
        fields = [self.user_id, self.email, self.purpose]
        if self.locale is not None:
            # Appended only when given, so requests without one keep their fingerprints.
            fields.append(self.locale)
        if self.method != "link":
            # Likewise: a link request's fingerprint is what it was before codes.
            fields.append(f"method:{self.method}")
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
# What a mailbox's wrong codes are counted by (keyed, like the budgets' subjects).
CODE_BUDGET_CONTEXT = b"notifier.code-failures.v1"
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
    method: Method = "link"


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


def _method(raw: str) -> Method:
    if raw not in get_args(Method):
        raise InvalidRequest("method", f"must be one of {', '.join(get_args(Method))}")
    return raw  # type: ignore[return-value]


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


@dataclass(frozen=True, slots=True)
class Budgets:
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
    def of(cls, policy: Policy, request: VerificationRequest, client_id: str | None) -> Budgets:
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
    # No later verification was asked for its user and purpose (to any address).
    newest_for_user: bool = True
    # Where the person goes back to after Confirm (checked when it was stored), if anywhere.
    return_to: str | None = None

    def renewable(self, horizon: float) -> bool:
        """Whether its page may send one fresh link: only an expired link, never replaced
        (a link renews once, for good, and a replaced link is no longer the user's), the
        newest asked for its user (who may have moved on to another address), of a user not
        verified yet, whose client's key is still valid, that expired less than `horizon`
        seconds ago, with its address still there."""
        return (
            self.outcome == "expired"
            and not self.superseded
            and self.newest_for_user
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


# -- confirming by code ----------------------------------------------------------------------


class NoCode(RequestError):
    """A code was submitted for a verification that has none (its method is `link`)."""

    code = "no_code"

    def __init__(self) -> None:
        super().__init__(
            "this verification is confirmed by its link only (method link): it has no code; "
            "request one with method code or link_and_code"
        )


@dataclass(frozen=True, slots=True)
class CodeCheck:
    """What a submitted code did. `attempts_remaining`: wrong codes this verification may
    still take (with "wrong" and "locked"); `superseded_by`: what replaced it (with
    "expired", when a newer verification's email carries the code); `locked_by` and
    `retry_after`: why it is locked, and for a mailbox lock, in how many seconds a code
    may be tried again at the latest."""

    outcome: CodeOutcome
    verification_id: uuid.UUID
    attempts_remaining: int | None = None
    superseded_by: uuid.UUID | None = None
    locked_by: CodeLock | None = None
    retry_after: int | None = None
