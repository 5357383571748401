"""The delivery state machine: every word for where a delivery stands, and every decision
that moves it, in one place.

    pending --claim--> sending --sent--> sent --a later report: a permanent bounce--> bounced
       ^                  |--transient / unknown, retry due before the link expires--> pending
       |                  |--throttled by the provider: its attempt handed back, a short
       |                  |  wait (the link's expiry still bounds it)--> pending
       |                  |--permanent, attempts or unknowns used up--> failed
       |                  '--link expired, superseded or verified before DATA--> expired/sent
       '--lease expired (worker died): the next claim takes it over

Three decisions, each a pure function here and, where the database takes it in the same
statement that changes the row, a CASE in SQL that says it mirrors the function (and a test
runs both over every case):
- `claim_fate`: what a claim does with a row (schema claim_v4's `fate`);
- `judge`: what an attempt's SMTP result and the pre-send gate's answer mean (worker);
- `settle`: the row's next status after an attempt (schema complete_v2).

"What does a 4xx at RCPT do?" -- `judge("transient", ...)` -> outcome "transient", retried;
`settle("transient", ...)` -> "pending" while attempts remain and the retry lands before the
link expires, else "failed" or "expired". Whether a reply is transient, permanent or whose
fault is read from the reply in delivery.smtp_replies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, assert_never, get_args

# -- the vocabulary -------------------------------------------------------------------------

# An outbox row's status (schema: email_outbox.status).
DeliveryStatus = Literal["pending", "sending", "sent", "failed", "expired", "bounced"]
TERMINAL: frozenset[DeliveryStatus] = frozenset({"sent", "failed", "expired", "bounced"})
# How a claim found its row (schema domain notifier.discovery).
Discovery = Literal["notify", "sweep", "retry_timer", "expired_lease", "poll"]
# What a claim does with a row: hand it out for sending, or settle it on the spot.
Fate = Literal["send", "expired", "superseded", "verified", "exhausted"]
# The verification as the pre-send gate sees it.
VerificationState = Literal["live", "expired", "superseded", "verified"]
# How a send ended at the transport: "aborted" means the gate said no before the body;
# "throttled", that the provider asked us to slow down (a rate, not the message, refused).
SendOutcome = Literal["sent", "transient", "permanent", "unknown", "throttled", "aborted"]
# Whose problem a permanent refusal is: only the recipient's own mailbox suppresses it;
# ours (a refused sender, a policy or content rejection) alerts the operator.
Refusal = Literal["recipient", "configuration", "message"]
# How an attempt ended, as the worker reports it.
AttemptOutcome = Literal[
    "sent",
    "transient",
    "permanent",
    "unknown",
    "throttled",
    "expired",
    "superseded",
    "verified",
    "lease_lost",
]
# What the attempts log and a row's last_outcome may hold (schema domain
# notifier.delivery_outcome): the worker's outcomes, and what the database itself records
# when a worker vanished mid-attempt or handed a row back at shutdown.
RecordedOutcome = AttemptOutcome | Literal["lease_expired", "released"]
# How a verification is confirmed (schema: verifications.method): by following its link,
# by typing its code into the app, or either.
Method = Literal["link", "code", "link_and_code"]
# What a submitted code did (schema confirm_code_v1's result, past the two that are the
# caller's mistake: not_found and no_code). "wrong" is every wrong code alike, however it
# was wrong.
CodeOutcome = Literal["verified", "already_verified", "expired", "locked", "wrong"]
# What locked a code: its own wrong codes, or its mailbox's over the failure window.
CodeLock = Literal["attempts", "mailbox"]
# What following a link did ("ready": a live link, seen without confirming it).
ConfirmOutcome = Literal["verified", "already_verified", "expired", "invalid", "ready"]

RECORDED_OUTCOMES: frozenset[str] = frozenset(
    (*get_args(AttemptOutcome), "lease_expired", "released")
)


# -- what a claim does --------------------------------------------------------------------------


def claim_fate(
    *, verified: bool, superseded: bool, expired: bool, attempts: int, max_attempts: int
) -> Fate:
    """What a claim does with a claimable row. Mirrored by claim_v4's CASE (same order)."""
    if verified:
        return "verified"  # settled as sent: the person confirmed with an earlier email
    if superseded:
        return "superseded"  # settled as expired: a newer link replaced this one
    if expired:
        return "expired"  # never sent (invariant 5)
    if attempts >= max_attempts:
        return "exhausted"  # its last attempt's worker died: failed, not retried forever
    return "send"


# -- what an attempt's result means -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sendability:
    """The pre-send gate's answer for one row: is the lease still held, and the link live?"""

    lease_held: bool
    verification: VerificationState | None


@dataclass(frozen=True, slots=True)
class Judgement:
    """What one attempt's result means for its delivery."""

    outcome: AttemptOutcome
    # Try again after a backoff delay (settle still decides whether there is a next time).
    retry: bool = False
    # The recipient's own mailbox refused for good: suppress it.
    suppress: bool = False
    # Refused for our side's reasons: count it and tell the operator.
    configuration_problem: bool = False


def judge(send: SendOutcome, refusal: Refusal | None, gate: Sendability | None) -> Judgement:
    """The meaning of a transport result, given the gate's answer when it said no."""
    match send:
        case "sent":
            return Judgement("sent")
        case "permanent":
            return Judgement(
                "permanent",
                suppress=refusal == "recipient",
                configuration_problem=refusal == "configuration",
            )
        case "transient" | "unknown" | "throttled":
            return Judgement(send, retry=True)
        case "aborted":
            return _aborted(gate)
        case _:
            assert_never(send)


def _aborted(gate: Sendability | None) -> Judgement:
    """The transport did not send the body: because the gate said no, or said nothing."""
    if gate is None or not gate.lease_held or gate.verification is None:
        return Judgement("lease_lost")
    match gate.verification:
        case "live":
            # The gate said yes, yet the transport aborted: worth another try.
            return Judgement("transient", retry=True)
        case "expired" | "superseded" | "verified":
            return Judgement(gate.verification)
        case _:
            assert_never(gate.verification)


# -- where the delivery goes next -------------------------------------------------------------


def settle(
    outcome: AttemptOutcome,
    *,
    attempts: int,
    max_attempts: int,
    unknown_outcomes: int,
    unknown_limit: int,
    retry_after_expiry: bool,
) -> DeliveryStatus:
    """A row's next status after an attempt that still held its lease. Mirrored by
    complete_v2's CASE in the schema (same order). `unknown_outcomes` counts those
    before this attempt; `retry_after_expiry`: the retry delay would land after the link
    expires."""
    match outcome:
        case "sent" | "verified":
            return "sent"
        case "permanent":
            return "failed"
        case "expired" | "superseded":
            return "expired"
        case "throttled":
            # Its attempt is handed back: only the link's expiry ends it.
            return "expired" if retry_after_expiry else "pending"
        case "unknown" if unknown_outcomes + 1 >= unknown_limit:
            return "failed"  # each retry after an unknown outcome may be a duplicate
        case "transient" | "unknown" | "lease_lost":
            if attempts >= max_attempts:
                return "failed"
            if retry_after_expiry:
                return "expired"  # a retry would send a dead link
            return "pending"
        case _:
            assert_never(outcome)
