"""What the app hears: every type of event a state change writes, and how an event is named.

An event is a row the database writes in the same transaction as the change it records
(schema 0016: statement triggers on the rows that change insert into notifier.events), so
it exists exactly when its change committed. The feed (`GET /v1/events`), the webhooks and
NOTIFY notifier_events all carry these. A new type is one line here and one line in the
trigger (or one INSERT in the function) where its change happens; the feed, the webhooks and
the console carry any type.
"""

from __future__ import annotations

import re
import uuid
from typing import Literal, get_args

EventType = Literal[
    "verification.created",  # a verification was requested (its email is on its way)
    "verification.sent",  # the mail server accepted its email (data: provider_message_id)
    "verification.failed",  # it will not be sent (data: reason, a FailureReason)
    "verification.confirmed",  # the person confirmed the address
    "verification.expired",  # its link lapsed unconfirmed (found by the lapse sweep)
    "verification.superseded",  # a newer verification replaced it (data: superseded_by)
    "verification.code_locked",  # wrong codes locked its code (data: code_failures)
    "email.suppressed",  # an address is refused for good for a while (data: redacted)
    "email.bounced",  # the recipient's server refused it after the relay accepted it
    "email.complained",  # the recipient reported it as spam (data: the address, redacted)
]
EVENT_TYPES: tuple[EventType, ...] = get_args(EventType)

# Why a delivery failed, as an app may tell the person (never the mail server's words).
FailureReason = Literal[
    "rejected",  # the recipient's mail server refused it for good
    "outcome_unknown",  # sent into silence too often: not sent again, lest it be doubled
    "attempts_exhausted",  # every attempt failed for passing reasons
    "bounced",  # accepted by the relay, then refused by the recipient's server
]

_PREFIX = "evt_"
_EVENT_ID = re.compile(r"^evt_[0-9a-f]{32}$")


def event_id(uid: uuid.UUID) -> str:
    """The public id of an event (`evt_` and 32 hex digits): its webhook-id too."""
    return _PREFIX + uid.hex


def is_event_id(text: str) -> bool:
    return _EVENT_ID.match(text) is not None


def check_types(types: list[str]) -> list[EventType]:
    """`types` as event types, or ValueError naming the unknown ones and the known."""
    unknown = [t for t in types if t not in EVENT_TYPES]
    if unknown:
        raise ValueError(
            f"unknown event type {', '.join(unknown)}: the types are {', '.join(EVENT_TYPES)}"
        )
    return [t for t in EVENT_TYPES if t in types]
