"""The delivery state machine, row by row: every case of every decision in one table each."""

from __future__ import annotations

import pytest

from notifier.outcomes import (
    AttemptOutcome,
    DeliveryStatus,
    Fate,
    Judgement,
    Refusal,
    Sendability,
    SendOutcome,
    claim_fate,
    judge,
    settle,
)

HELD_LIVE = Sendability(lease_held=True, verification="live")
LOST = Sendability(lease_held=False, verification=None)


@pytest.mark.parametrize(
    ("send", "refusal", "gate", "judgement"),
    [
        ("sent", None, HELD_LIVE, Judgement("sent")),
        ("transient", None, HELD_LIVE, Judgement("transient", retry=True)),  # 4xx, no connection
        ("unknown", None, HELD_LIVE, Judgement("unknown", retry=True)),  # lost after the body
        ("throttled", None, HELD_LIVE, Judgement("throttled", retry=True)),  # slow down
        ("permanent", "recipient", HELD_LIVE, Judgement("permanent", suppress=True)),
        (
            "permanent",
            "configuration",
            HELD_LIVE,
            Judgement("permanent", configuration_problem=True),
        ),
        ("permanent", "message", HELD_LIVE, Judgement("permanent")),
        ("aborted", None, None, Judgement("lease_lost")),  # the gate could not answer
        ("aborted", None, LOST, Judgement("lease_lost")),
        ("aborted", None, HELD_LIVE, Judgement("transient", retry=True)),
        ("aborted", None, Sendability(True, "expired"), Judgement("expired")),
        ("aborted", None, Sendability(True, "superseded"), Judgement("superseded")),
        ("aborted", None, Sendability(True, "verified"), Judgement("verified")),
    ],
)
def test_an_attempts_result_means_one_thing(
    send: SendOutcome, refusal: Refusal | None, gate: Sendability | None, judgement: Judgement
) -> None:
    assert judge(send, refusal, gate) == judgement


# attempts, max_attempts, unknown_outcomes before this one, unknown limit, retry after expiry
ROOM = {
    "attempts": 1,
    "max_attempts": 5,
    "unknown_outcomes": 0,
    "unknown_limit": 3,
    "retry_after_expiry": False,
}
LAST_ATTEMPT = {**ROOM, "attempts": 5}
LAST_UNKNOWN = {**ROOM, "unknown_outcomes": 2}
LATE = {**ROOM, "retry_after_expiry": True}


@pytest.mark.parametrize(
    ("outcome", "counters", "status"),
    [
        ("sent", LAST_ATTEMPT, "sent"),
        ("verified", ROOM, "sent"),
        ("permanent", ROOM, "failed"),
        ("expired", ROOM, "expired"),
        ("superseded", ROOM, "expired"),
        ("transient", ROOM, "pending"),
        ("transient", LAST_ATTEMPT, "failed"),
        ("transient", LATE, "expired"),
        ("unknown", ROOM, "pending"),
        ("unknown", LAST_UNKNOWN, "failed"),
        ("unknown", LAST_ATTEMPT, "failed"),
        ("unknown", LATE, "expired"),
        ("lease_lost", ROOM, "pending"),
        ("lease_lost", LAST_ATTEMPT, "failed"),
    ],
)
def test_an_attempt_moves_its_delivery_to_one_next_status(
    outcome: AttemptOutcome, counters: dict[str, object], status: DeliveryStatus
) -> None:
    assert settle(outcome, **counters) == status  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("verified", "superseded", "expired", "exhausted", "fate"),
    [
        (True, False, True, True, "verified"),
        (False, True, True, True, "superseded"),
        (False, False, True, True, "expired"),
        (False, False, False, True, "exhausted"),
        (False, False, False, False, "send"),
    ],
)
def test_a_claim_sends_only_a_live_row_with_attempts_left(
    verified: bool, superseded: bool, expired: bool, exhausted: bool, fate: Fate
) -> None:
    attempts = 5 if exhausted else 1
    assert (
        claim_fate(
            verified=verified,
            superseded=superseded,
            expired=expired,
            attempts=attempts,
            max_attempts=5,
        )
        == fate
    )


def test_a_throttled_try_is_pending_again_whatever_its_attempts() -> None:
    # Its attempt is handed back: the provider refused a rate, not the message.
    for attempts in (1, 5, 100):
        assert (
            settle(
                "throttled",
                attempts=attempts,
                max_attempts=5,
                unknown_outcomes=0,
                unknown_limit=3,
                retry_after_expiry=False,
            )
            == "pending"
        )


def test_a_throttled_try_whose_wait_outlasts_the_link_expires() -> None:
    assert (
        settle(
            "throttled",
            attempts=1,
            max_attempts=5,
            unknown_outcomes=0,
            unknown_limit=3,
            retry_after_expiry=True,
        )
        == "expired"
    )
