"""The HTTP API's request and response shapes; FastAPI builds /openapi.json from these."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from notifier.locales import LOCALE_MAX_CHARS, LOCALE_PATTERN
from notifier.outcomes import DeliveryStatus
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


class VerificationAccepted(BaseModel):
    id: uuid.UUID
    status: DeliveryStatus
    expires_at: datetime


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
