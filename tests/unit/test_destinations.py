"""Places per recipient domain: a domain holds at most its share, waiting rows are handed
places in order, and a cancelled wait never loses a place."""

from __future__ import annotations

import anyio
import pytest

from notifier.delivery.destinations import DomainPlaces

pytestmark = pytest.mark.anyio


async def test_a_domain_takes_no_more_places_than_its_share() -> None:
    places = DomainPlaces(per_domain=2, max_waiting=5)
    assert [places.take("tarpit.example") for _ in range(3)] == [True, True, False]
    assert places.take("example.com")


async def test_a_place_that_ends_goes_to_the_first_row_waiting() -> None:
    places = DomainPlaces(per_domain=1, max_waiting=5)
    assert places.take("d.example")
    order: list[int] = []

    async def waiter(n: int) -> None:
        await places.wait("d.example")
        order.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(waiter, n)
            await anyio.wait_all_tasks_blocked()
        for _ in range(3):
            places.leave("d.example")
            await anyio.wait_all_tasks_blocked()
    assert order == [0, 1, 2]
    assert places.in_flight("d.example") == 1  # the last one still holds it


async def test_a_cancelled_wait_gives_up_its_turn_and_the_domain_is_forgotten_when_idle() -> None:
    places = DomainPlaces(per_domain=1, max_waiting=5)
    assert places.take("d.example")
    with anyio.move_on_after(0.01):
        await places.wait("d.example")
    places.leave("d.example")
    assert places.in_flight("d.example") == 0
    assert places.take("d.example")


async def test_a_place_handed_over_as_its_waiter_is_cancelled_is_never_lost() -> None:
    places = DomainPlaces(per_domain=1, max_waiting=5)
    assert places.take("d.example")

    async def send() -> None:
        # As the worker's send does: once the wait returns the place is its, to leave.
        await places.wait("d.example")
        try:
            await anyio.sleep_forever()  # waiting for a send slot
        finally:
            places.leave("d.example")

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await anyio.wait_all_tasks_blocked()
            places.leave("d.example")  # handed to the waiter...
            scope.cancel()  # ...which is cancelled in the same moment
    assert places.in_flight("d.example") == 0
    assert places.take("d.example")


async def test_only_so_many_rows_may_wait_for_one_domain() -> None:
    places = DomainPlaces(per_domain=1, max_waiting=1)
    assert places.take("d.example")
    async with anyio.create_task_group() as tg:
        tg.start_soon(places.wait, "d.example")
        await anyio.wait_all_tasks_blocked()
        assert not places.may_wait("d.example")
        assert places.may_wait("other.example")
        tg.cancel_scope.cancel()
