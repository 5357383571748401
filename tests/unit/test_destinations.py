"""Places per recipient domain: a domain starts with one, gains half as many again by each
quick send and loses half by each slow one, never holds more than its most; waiting rows
are handed places in order; no place is ever lost, whatever ends when."""

from __future__ import annotations

import anyio
import pytest

from notifier.delivery.destinations import (
    DEFER_MAX_SECONDS,
    SLOW_SEND_SECONDS,
    DomainPlaces,
)

pytestmark = pytest.mark.anyio

QUICK = 0.01
SLOW = SLOW_SEND_SECONDS + 1


def taken(places: DomainPlaces, domain: str, count: int) -> list[bool]:
    return [places.take(domain) for _ in range(count)]


async def test_a_new_domain_starts_with_one_place() -> None:
    places = DomainPlaces(most=6, max_waiting=5)
    assert taken(places, "new.example", 2) == [True, False]
    assert places.take("other.example")


async def test_a_place_a_quick_send_gains_goes_to_a_row_waiting_at_once() -> None:
    places = DomainPlaces(most=6, max_waiting=5)
    assert places.take("d.example")
    tickets = [places.ticket("d.example") for _ in range(2)]
    places.ended("d.example", QUICK)  # one place passed on, one gained
    assert places.in_flight("d.example") == 2
    assert all(t is not None and t._turn.event.is_set() for t in tickets)


async def test_each_quick_send_gives_its_domain_more_places_up_to_the_most() -> None:
    places = DomainPlaces(most=4, max_waiting=5)
    for _ in range(10):
        assert places.take("quick.example")
        places.ended("quick.example", QUICK)
    assert places.places("quick.example") == 4
    assert taken(places, "quick.example", 5) == [True] * 4 + [False]


async def test_places_grow_by_half_again_for_each_quick_send() -> None:
    places = DomainPlaces(most=200, max_waiting=5)
    grown = []
    for _ in range(6):
        places.take("d.example")
        places.ended("d.example", QUICK)
        grown.append(places.places("d.example"))
    assert grown == [2, 3, 4, 6, 9, 13]


async def test_a_slow_send_halves_its_domains_places_down_to_one() -> None:
    places = DomainPlaces(most=8, max_waiting=5)
    for _ in range(7):
        places.take("d.example")
        places.ended("d.example", QUICK)
    assert places.places("d.example") == 8
    for expected in (4, 2, 1, 1):
        places.take("d.example")
        places.ended("d.example", SLOW)
        assert places.places("d.example") == expected


async def test_a_slow_domain_is_remembered_when_its_rows_come_back() -> None:
    places = DomainPlaces(most=8, max_waiting=5)
    places.take("tarpit.example")
    places.ended("tarpit.example", SLOW)
    # Nothing of it in flight now; its retries come back to one place, however many it had.
    assert places.places("tarpit.example") == 1
    assert taken(places, "tarpit.example", 2) == [True, False]


async def test_a_place_that_ends_goes_to_the_first_row_waiting() -> None:
    places = DomainPlaces(most=1, max_waiting=5, first=1)
    assert places.take("d.example")
    order: list[int] = []
    tickets = [places.ticket("d.example") for _ in range(3)]

    async def waiter(n: int) -> None:
        ticket = tickets[n]
        assert ticket is not None
        await ticket.wait()
        order.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(waiter, n)
        await anyio.wait_all_tasks_blocked()
        for _ in range(3):
            places.ended("d.example", QUICK)
            await anyio.wait_all_tasks_blocked()
    assert order == [0, 1, 2]
    assert places.in_flight("d.example") == 1  # the last one still holds it


async def test_a_place_that_ends_before_its_waiter_runs_still_reaches_it() -> None:
    # The row is put in line when it is sorted; its send starts later. Every send of the
    # domain ending in between must hand the place to it, not forget the domain.
    places = DomainPlaces(most=1, max_waiting=5, first=1)
    assert places.take("d.example")
    ticket = places.ticket("d.example")
    assert ticket is not None
    places.ended("d.example", QUICK)
    with anyio.fail_after(1):
        await ticket.wait()
    assert places.in_flight("d.example") == 1


async def test_a_new_row_does_not_jump_ahead_of_rows_waiting() -> None:
    places = DomainPlaces(most=2, max_waiting=5, first=2)
    assert taken(places, "d.example", 2) == [True, True]
    assert places.ticket("d.example") is not None
    places.ended("d.example", QUICK)  # handed to the ticket, not left free
    assert not places.take("d.example")


async def test_a_cancelled_wait_gives_up_its_turn() -> None:
    places = DomainPlaces(most=1, max_waiting=5, first=1)
    assert places.take("d.example")
    ticket = places.ticket("d.example")
    assert ticket is not None
    with anyio.move_on_after(0.01):
        await ticket.wait()
    places.ended("d.example", QUICK)
    assert places.in_flight("d.example") == 0
    assert places.take("d.example")


async def test_a_place_handed_over_as_its_waiter_is_cancelled_is_never_lost() -> None:
    places = DomainPlaces(most=1, max_waiting=5, first=1)
    assert places.take("d.example")
    ticket = places.ticket("d.example")
    assert ticket is not None

    async def send() -> None:
        # As the worker's send does: once the wait returns the place is its, to leave.
        await ticket.wait()
        try:
            await anyio.sleep_forever()  # waiting for a send slot
        finally:
            places.ended("d.example", None)

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await anyio.wait_all_tasks_blocked()
            places.ended("d.example", QUICK)  # handed to the waiter...
            scope.cancel()  # ...which is cancelled in the same moment
    assert places.in_flight("d.example") == 0
    assert places.take("d.example")


async def test_only_so_many_rows_may_wait_for_one_domain() -> None:
    places = DomainPlaces(most=1, max_waiting=1, first=1)
    assert places.take("d.example")
    assert places.ticket("d.example") is not None
    assert places.ticket("d.example") is None
    assert places.ticket("other.example") is not None


async def test_a_slow_send_sends_away_the_rows_a_slow_domain_may_not_keep_waiting() -> None:
    places = DomainPlaces(most=8, max_waiting=16)
    assert places.take("tarpit.example")
    tickets = [places.ticket("tarpit.example") for _ in range(16)]
    places.ended("tarpit.example", SLOW)
    # One is handed the place; the newest beyond a slow domain's two are sent away.
    handed = [t for t in tickets if t is not None and t._turn.event.is_set()]
    evicted = [t for t in handed if t._turn.evicted]
    assert len(evicted) == 14 and len(handed) == 15
    # A slow domain keeps two waiting: one still does, so one more may, then no more.
    assert places.ticket("tarpit.example") is not None
    assert places.ticket("tarpit.example") is None


async def test_a_crowded_domains_rows_go_back_for_longer_each_time() -> None:
    places = DomainPlaces(most=1, max_waiting=0, first=1)
    delays = [places.defer_delay("d.example") for _ in range(8)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0]
    assert delays[-1] == DEFER_MAX_SECONDS
    places.take("other.example")
    assert places.defer_delay("other.example") == 1.0
