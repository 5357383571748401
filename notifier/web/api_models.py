"""The HTTP API's request and response shapes; FastAPI builds /openapi.json from these."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from notifier.codes import MAX_INPUT_CHARS
from notifier.event_types import EventType
from notifier.locales import LOCALE_MAX_CHARS, LOCALE_PATTERN
from notifier.outcomes import CodeLock, CodeOutcome, DeliveryStatus, Method
from notifier.verifications import USER_ID_MAX_CHARS

EMAIL_MAX_CHARS = 254
TOKEN_MAX_CHARS = 128


class Strict(BaseModel):
    # Unknown fields are an error, not silently dropped: a typo must not pass as a request.
    model_config = ConfigDict(extra="forbid", strict=True)


class VerificationIn(Strict):
    user_id: str = Field(min_length=1, max_length=USER_ID_MAX_CHARS, examples=["user-42"])
    email: str = Field(min_length=3, max_length=EMAIL_MAX_CHARS, examples=["ada@example.com"])
    purpose: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[a-z][a-z0-9_.-]{0,63}$",
        examples=["signup"],
    )
    locale: str | None = Field(
        default=None,
        min_length=2,
        max_length=LOCALE_MAX_CHARS,
        pattern=LOCALE_PATTERN,
        description="The email's language (a tag such as de or pt-BR); the closest one "
        "with templates is used, English by default.",
        examples=["de"],
    )
    method: Method | None = Field(
        default=None,
        description="How the person confirms: link (the email's link), code (a code they "
        "type into the app, posted to /v1/verifications/{id}/code) or link_and_code; absent: "
        "NOTIFIER_VERIFY_METHOD's.",
        examples=["code"],
    )
    return_to: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="Where the person goes back to after Confirm (303, with a signed "
        "outcome); must be under NOTIFIER_RETURN_URLS (and the API key's own return URLs), "
        "else 422. Resends keep it.",
        examples=["https://app.example.com/welcome"],
    )


class VerificationAccepted(BaseModel):
    id: uuid.UUID
    status: DeliveryStatus
    method: Method
    expires_at: datetime


class CodeIn(Strict):
    code: str = Field(
        min_length=1,
        max_length=MAX_INPUT_CHARS,
        description="What the person typed; spaces and dashes are ignored.",
        examples=["123 456"],
    )


class CodeOut(BaseModel):
    result: CodeOutcome = Field(
        description="verified (200), already_verified (200), wrong (400: every wrong code "
        "alike), expired (410), or locked (423; 429 with Retry-After when it is the "
        "mailbox's wrong codes over the failure window)."
    )
    verification_id: uuid.UUID
    attempts_remaining: int | None = Field(
        description="Wrong codes this verification may still take (with wrong and locked)."
    )
    superseded_by: uuid.UUID | None = Field(
        description="With expired: the newer verification whose email carries the code."
    )
    locked_by: CodeLock | None = Field(
        description="With locked: its own wrong codes (a new request is needed), or its "
        "mailbox's (retry_after)."
    )
    retry_after: int | None = Field(description="With a mailbox lock: seconds, at the latest.")
    message: str = Field(description="What to tell the person.")


class LatestVerification(BaseModel):
    """The newest verification of a resend chain: where the user's outcome is decided."""

    id: uuid.UUID
    status: DeliveryStatus
    verified: bool
    verified_at: datetime | None
    expires_at: datetime


class VerificationStatus(BaseModel):
    id: uuid.UUID
    user_id: str
    status: DeliveryStatus
    purpose: str
    email: str = Field(description="The recipient, redacted.")
    attempts: int
    max_attempts: int
    verified: bool
    verified_at: datetime | None
    superseded: bool
    superseded_by: uuid.UUID | None = Field(
        description="The verification that replaced this one (a resend), if one did."
    )
    latest: LatestVerification = Field(
        description="The newest verification of this one's resend chain (this one, if none "
        "replaced it): an app polling the first id learns the user's outcome here."
    )
    created_at: datetime
    expires_at: datetime
    next_attempt_at: datetime | None = Field(description="When a pending delivery is next tried.")
    completed_at: datetime | None
    last_outcome: str | None
    last_error: str | None = Field(description="Why the last attempt failed; safe to show.")
    method: Method
    code_attempts_remaining: int | None = Field(
        description="Wrong codes it may still take (None: it has no code)."
    )
    code_expires_at: datetime | None
    locked: bool = Field(description="Its code is locked by wrong codes.")


class Attempt(BaseModel):
    attempt: int
    claimed_by: str
    discovered_by: str | None
    outcome: str
    smtp_code: int | None
    detail: str | None
    provider_message_id: str | None
    body_sent: bool
    lease_held: bool
    duration_ms: float | None
    claimed_at: datetime | None = Field(
        description="When the claim this attempt ran under was made."
    )
    finished_at: datetime


class Attempts(BaseModel):
    verification_id: uuid.UUID
    attempts: list[Attempt]


class Suppression(BaseModel):
    email: str = Field(description="The canonical mailbox (lowercased, +tags stripped).")
    reason: str
    smtp_code: int | None
    suppressed_at: datetime
    expires_at: datetime | None = Field(description="Null: until an operator clears it.")


class Suppressions(BaseModel):
    suppressions: list[Suppression]


class EventOut(BaseModel):
    id: str = Field(description="evt_ and 32 hex digits: also the webhook-id of its webhooks")
    type: EventType
    occurred_at: datetime
    verification_id: uuid.UUID | None
    data: dict[str, Any] = Field(
        description="Thin: verification_id, user_id, purpose, client_id, status and the "
        "type's own fields; never a token, an address only redacted."
    )
    cursor: str = Field(description="Pass as `after` to read on from just past this event.")


class EventsPage(BaseModel):
    events: list[EventOut]
    next: str = Field(
        description="The cursor to read on from: the last event's, or the one given when "
        "there was nothing new."
    )


class WebhookIn(Strict):
    url: str = Field(
        min_length=8,
        max_length=2048,
        description="https, resolving only to public addresses (unless "
        "NOTIFIER_WEBHOOK_ALLOW_PRIVATE)",
        examples=["https://app.example.com/hooks/notifier"],
    )
    event_types: list[EventType] | None = Field(
        default=None, min_length=1, description="Only these types; absent: every type."
    )
    description: str | None = Field(default=None, max_length=200)


class WebhookEndpointOut(BaseModel):
    id: uuid.UUID
    url: str
    event_types: list[str] | None
    description: str | None
    created_at: datetime
    failing_since: datetime | None = Field(description="Every delivery since then failed.")
    last_success_at: datetime | None
    last_failure_at: datetime | None
    disabled_at: datetime | None
    disabled_reason: str | None
    previous_secret_until: datetime | None = Field(
        description="A rotated-out secret signs beside the current one until then."
    )
    pending: int = Field(description="Deliveries waiting or in flight.")
    dead: int = Field(description="Deliveries that ran out of retries (replayable).")


class WebhookEndpoints(BaseModel):
    endpoints: list[WebhookEndpointOut]


class WebhookCreated(WebhookEndpointOut):
    secret: str = Field(description="whsec_...: shown only now; receivers verify with it.")


class WebhookRotated(BaseModel):
    secret: str = Field(description="The new whsec_ secret, shown only now.")
    previous_secret_until: datetime


class ConfirmIn(Strict):
    token: str = Field(min_length=1, max_length=TOKEN_MAX_CHARS)


class ConfirmOut(BaseModel):
    outcome: Literal["verified", "already_verified", "expired", "invalid"]
    verification_id: uuid.UUID | None = None
    superseded_by: uuid.UUID | None = Field(
        None,
        description="For a link a newer verification replaced (a resend): that verification, "
        "whose own link is the one to use.",
    )
    return_url: str | None = Field(
        None,
        description="For a verified link whose verification has a return_to: it, with the "
        "signed outcome (verification_id, outcome, expires, signature) the app checks.",
    )
    message: str


class ErrorDetail(BaseModel):
    code: str
    message: str
    fields: list[str] = []


class ErrorOut(BaseModel):
    error: ErrorDetail


class Health(BaseModel):
    status: Literal["ok", "ready", "unavailable"]
    detail: str | None = None
