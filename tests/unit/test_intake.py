"""The intake keeps notified ids bounded, deduplicated and in order."""

from __future__ import annotations

import anyio
import pytest

from notifier.delivery.intake import Intake


def test_ids_come_out_oldest_first_without_duplicates() -> None:
    intake = Intake()
    intake.offer_ids([3, 1])
    intake.offer_ids([1, 2])
    assert list(intake.take_ids(10)) == [3, 1, 2]


def test_take_ids_respects_its_limit() -> None:
    intake = Intake()
    intake.offer_ids(range(1, 11))
    assert list(intake.take_ids(4)) == [1, 2, 3, 4]
    assert list(intake.take_ids(100)) == [5, 6, 7, 8, 9, 10]


def test_a_flood_beyond_the_bound_is_dropped_for_a_sweep_not_kept_in_memory() -> None:
    intake = Intake(max_waiting_ids=100)
    intake.offer_ids(range(1, 1001))
    assert len(intake.take_ids(10_000)) == 100
    assert intake.dropped_ids == 900
    assert intake.take_sweep() == "sweep"


def test_a_specific_sweep_reason_is_not_overwritten_by_a_generic_one() -> None:
    intake = Intake()
    intake.request_sweep("poll")
    intake.request_sweep("sweep")
    assert intake.take_sweep() == "poll"
    assert intake.take_sweep() is None


def test_discovery_is_kept_per_id() -> None:
    intake = Intake()
    intake.offer_ids([5], "retry_timer")
    intake.offer_ids([6])
    assert [d for _, d in intake.take_ids(10).values()] == ["retry_timer", "notify"]


@pytest.mark.anyio
async def test_wait_returns_as_soon_as_work_arrives() -> None:
    intake = Intake()
    async with anyio.create_task_group() as tg:
        tg.start_soon(intake.wait)
        await anyio.wait_all_tasks_blocked()
        intake.offer_ids([1])
    assert intake.has_work()
