"""The outbox's writes and reads of verifications: requesting one inside the caller's
transaction, on any driver the app uses (the library call), or as its own transaction (the
API's), and confirming its token.

A request is validated (notifier.verifications) and given its token material here, in
Python, once for every driver; the verification and its outbox row are then written by one
statement that also honours the idempotency key, suppression, the limits and supersession
(schema request_v4): one round trip, run by the driver's runner (storage.drivers).
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from notifier.outcomes import Method
from notifier.return_urls import InvalidReturn
from notifier.storage.connection import Runner
from notifier.storage.drivers import (
    AsyncRunner,
    CatalogueRunner,
    SyncRunner,
    async_runner,
    sync_runner,
)
from notifier.storage.queries import arguments, sql
from notifier.telemetry import inject_current, producer_span
from notifier.tokens import IssuedToken, TokenKeys, hash_token, looks_like_token
from notifier.verifications import (
    CODE_BUDGET_CONTEXT,
    Budgets,
    Confirmation,
    IdempotencyConflict,
    InvalidRequest,
    NotInTransaction,
    Policy,
    Suppressed,
    Throttled,
    VerificationRequest,
    VerificationResult,
    check_idempotency_key,
    message_id_for,
    resend_key,
)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A request validated and given what a new verification gets, ready to be written."""

    request: VerificationRequest
    policy: Policy
    budgets: Budgets
    verification_id: uuid.UUID
    issued: IssuedToken
    idempotency_key: str | None
    client_id: str | None
    replaces: uuid.UUID | None
    return_to: str | None
    # The code's keyed hash (None: a link only).
    code_hash: bytes | None

    @classmethod
    def of(
        cls,
        *,
        user_id: str,
        email: str,
        purpose: str | None = None,
        idempotency_key: str | None = None,
        policy: Policy | None = None,
        client_id: str | None = None,
        locale: str | None = None,
        replaces: uuid.UUID | None = None,
        return_to: str | None = None,
        key_return_urls: Sequence[str] | None = None,
        kept_return_to: str | None = None,
        method: str | None = None,
    ) -> _Prepared:
        """InvalidRequest for anything malformed, before anything is sent. `return_to` is
        checked against NOTIFIER_RETURN_URLS (and `key_return_urls`, the calling API key's
        narrowing of them); `kept_return_to` is a resend's, stored as its verification had
        it. `method` None: NOTIFIER_VERIFY_METHOD's."""
        policy = policy or env_policy()
        request = VerificationRequest.parse(
            user_id,
            email,
            purpose,
            policy.limits.subaddress_separators,
            locale,
            policy.codes.method if method is None else method,
        )
        if idempotency_key is not None:
            check_idempotency_key(idempotency_key)
        if return_to is not None:
            try:
                kept_return_to = policy.limits.return_urls.check(return_to, key_return_urls)
            except InvalidReturn as exc:
                raise InvalidRequest("return_to", str(exc)) from None
        verification_id = uuid.uuid4()
        issued = policy.keys.issue(verification_id)
        if request.method == "code":
            # No link: the stored hash is of a token nobody holds, so none confirms it
            # (the code is derived from the nonce, which it keeps).
            issued = dataclasses.replace(issued, token_hash=hash_token(secrets.token_urlsafe(32)))
        code_hash = None
        if request.method != "link":
            code = policy.keys.code(
                issued.key_id, verification_id, issued.nonce, policy.codes.digits
            )
            code_hash = policy.keys.code_hash(issued.key_id, verification_id, code)
        return cls(
            request,
            policy,
            Budgets.of(policy, request, client_id),
            verification_id,
            issued,
            idempotency_key,
            client_id,
            replaces,
            kept_return_to,
            code_hash,
        )

    def values(self, traceparent: str | None, tracestate: str | None) -> list[object]:
        """request_v5's arguments, in the order the statement binds them. Ids go as text,
        which every driver sends alike (the statement casts them). A code-only
        verification lives as long as its code."""
        request, policy, limits, budgets = (
            self.request,
            self.policy,
            self.policy.limits,
            self.budgets,
        )
        return arguments(
            STATEMENT,
            {
                "p_id": str(self.verification_id),
                "p_user_id": request.user_id,
                "p_email": request.email,
                "p_mailbox": request.address.mailbox,
                "p_suppression_key": request.address.folded,
                "p_purpose": request.purpose,
                "p_locale": request.locale,
                "p_token_key_id": self.issued.key_id,
                "p_token_nonce": self.issued.nonce,
                "p_token_hash": self.issued.token_hash,
                "p_ttl": policy.codes.ttl_seconds
                if request.method == "code"
                else policy.ttl_seconds,
                "p_message_id": message_id_for(self.verification_id, policy.message_id_domain),
                "p_max_attempts": limits.max_attempts,
                "p_traceparent": traceparent,
                "p_tracestate": tracestate,
                "p_idempotency_key": self.idempotency_key,
                "p_fingerprint": request.fingerprint(policy.keys),
                "p_known_fingerprints": request.fingerprints(policy.keys),
                "p_idempotency_ttl": limits.idempotency_ttl,
                "p_client_id": self.client_id,
                "p_resend_limit": limits.resend_limit,
                "p_window": limits.resend_window,
                "p_budget_scopes": budgets.scopes,
                "p_budget_subjects": budgets.subjects,
                "p_budget_limits": budgets.limits,
                "p_slice": budgets.slice_seconds,
                "p_replaces": None if self.replaces is None else str(self.replaces),
                "p_return_to": self.return_to,
                "p_method": request.method,
                "p_code_hash": self.code_hash,
                "p_code_subject": None
                if self.code_hash is None
                else policy.keys.digest(CODE_BUDGET_CONTEXT, request.address.mailbox.encode()),
                "p_code_digits": policy.codes.digits,
                "p_code_ttl": policy.codes.ttl_seconds,
            },
        )


# The one statement every driver runs (schema request_v5): one round trip in the caller's
# transaction; a refusal comes back as a row and writes nothing.
STATEMENT = "request_verification"


async def request(
    runner: AsyncRunner,
    *,
    traceparent: str | None = None,
    tracestate: str | None = None,
    **fields: Any,
) -> VerificationResult:
    """The request on `runner`, whatever its driver, with no transaction required (the
    API's own requests each commit by themselves). `fields`: request_verification's."""
    prepared = _Prepared.of(**fields)
    with producer_span() as span:
        if traceparent is None:
            traceparent, tracestate = inject_current()
        row = await runner.fetch_one(sql(STATEMENT), prepared.values(traceparent, tracestate))
        _note(span, row)
    return _answer(row, prepared.request.method)


def request_sync(
    runner: SyncRunner,
    *,
    traceparent: str | None = None,
    tracestate: str | None = None,
    **fields: Any,
) -> VerificationResult:
    """`request` for a sync driver."""
    prepared = _Prepared.of(**fields)
    with producer_span() as span:
        if traceparent is None:
            traceparent, tracestate = inject_current()
        row = runner.fetch_one(sql(STATEMENT), prepared.values(traceparent, tracestate))
        _note(span, row)
    return _answer(row, prepared.request.method)


async def request_standalone(conn: Runner, **fields: Any) -> VerificationResult:
    """A request that is its own transaction, on one of the package's own connections (the
    internal API, the console, the public pages): `request_verification`'s fields."""
    return await request(CatalogueRunner(conn), **fields)


async def request_verification(
    conn: object,
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
    return_to: str | None = None,
    method: str | None = None,
) -> VerificationResult:
    """Request a verification email, inside the caller's transaction on `conn` (an asyncpg
    Connection, a psycopg AsyncConnection, a SQLAlchemy AsyncConnection or AsyncSession).

    Nothing is sent unless that transaction commits: the worker is notified at COMMIT, and a
    rollback leaves nothing behind. Outside a transaction it raises NotInTransaction and
    writes nothing (the outbox promise would not hold). Raises InvalidRequest,
    IdempotencyConflict, Throttled or Suppressed without writing anything, and without
    aborting the caller's transaction. `policy` defaults to one read from the environment.
    `locale` (a language tag such as "de" or "pt-BR") picks the email's language; the
    closest one there are templates for is used, English by default.
    `client_id` is the API key that asked (None: the application's own code); idempotency
    keys are scoped to it, so two clients using the same key never collide, and a request
    supersedes only that client's earlier verifications of the recipient, and `replaces`
    (a console resend: a support key replacing the app's failed verification).
    `return_to` is where the person goes back to after Confirm, with a signed outcome
    (notifier.check_return); it must be under NOTIFIER_RETURN_URLS, else InvalidRequest.
    Resends keep it. `method`: "link", "code" (the email carries a code the person types
    into the app, confirmed with confirm_code) or "link_and_code"; None:
    NOTIFIER_VERIFY_METHOD's.
    """
    runner = async_runner(conn)
    if not await runner.in_transaction():
        raise NotInTransaction()
    return await request(
        runner,
        traceparent=traceparent,
        tracestate=tracestate,
        user_id=user_id,
        email=email,
        purpose=purpose,
        idempotency_key=idempotency_key,
        policy=policy,
        client_id=client_id,
        locale=locale,
        replaces=replaces,
        return_to=return_to,
        method=method,
    )


def request_verification_sync(
    conn: object,
    *,
    user_id: str,
    email: str,
    purpose: str | None = None,
    idempotency_key: str | None = None,
    policy: Policy | None = None,
    client_id: str | None = None,
    locale: str | None = None,
    return_to: str | None = None,
    method: str | None = None,
) -> VerificationResult:
    """`request_verification` on a sync connection (a psycopg Connection, a SQLAlchemy
    Connection or Session), inside the caller's transaction; the same arguments, result and
    errors."""
    runner = sync_runner(conn)
    return request_sync_in_transaction(
        runner,
        user_id=user_id,
        email=email,
        purpose=purpose,
        idempotency_key=idempotency_key,
        policy=policy,
        client_id=client_id,
        locale=locale,
        return_to=return_to,
        method=method,
    )


def request_sync_in_transaction(runner: SyncRunner, **fields: Any) -> VerificationResult:
    """`request_sync`, refused (NotInTransaction, nothing written) outside a transaction."""
    if not runner.in_transaction():
        raise NotInTransaction()
    return request_sync(runner, **fields)


def _note(span: Any, row: Mapping[str, Any]) -> None:
    if span is not None:
        span.set_attribute("notifier.request.result", row["result"])
        if row["result"] == "accepted":
            span.set_attribute("messaging.message.id", str(row["outbox_id"]))
            span.set_attribute("notifier.verification_id", str(row["id"]))


def _answer(row: Mapping[str, Any], method: Method) -> VerificationResult:
    """What request_v5's row means: a result, or the refusal raised as its error. `method`:
    the request's (a replay's too: its fingerprint holds the method)."""
    match row["result"]:
        case "accepted":
            return VerificationResult(
                uuid.UUID(row["id"]), "pending", row["expires_at"], method=method
            )
        case "replayed":
            return VerificationResult(
                uuid.UUID(row["id"]), row["status"], row["expires_at"], True, method
            )
        case "conflict":
            raise IdempotencyConflict()
        case "suppressed":
            raise Suppressed()
        case "throttled":
            raise Throttled(row["retry_after"], row["limit_scope"])
        case unknown:
            raise RuntimeError(f"request_v5 answered {unknown!r}")


_cached_policy: Policy | None = None


def env_policy() -> Policy:
    """The policy the environment configures, read once: the library calls' default."""
    global _cached_policy
    if _cached_policy is None:
        _cached_policy = Policy.from_env()
    return _cached_policy


async def confirm(conn: Runner, token: str, *, apply: bool, keys: TokenKeys) -> Confirmation:
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
        "newest_for_user": row["newest_for_user"],
        "return_to": row["return_to"],
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
