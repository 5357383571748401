"""The batcher: one flush per idle request, bigger batches under load, no timer."""

from __future__ import annotations

import anyio
import pytest

from notifier.delivery.batching import Batcher

pytestmark = pytest.mark.anyio


async def test_idle_batcher_flushes_a_lone_request_at_once() -> None:
    batches: list[list[int]] = []

    async def flush(items: list[int]) -> list[int]:
        batches.append(items)
        return [i * 10 for i in items]

    batcher = Batcher(flush, max_batch=100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.run)
        assert await batcher.submit(4) == 40
        tg.cancel_scope.cancel()
    assert batches == [[4]]


async def test_requests_arriving_during_a_flush_go_together_next() -> None:
    batches: list[list[int]] = []
    release = anyio.Event()

    async def flush(items: list[int]) -> list[int]:
        batches.append(items)
        if len(batches) == 1:
            await release.wait()
        return items

    batcher = Batcher(flush, max_batch=100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.run)
        tg.start_soon(batcher.submit, 0)
        await anyio.wait_all_tasks_blocked()
        for i in range(1, 6):
            tg.start_soon(batcher.submit, i)
        await anyio.wait_all_tasks_blocked()
        release.set()
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert batches == [[0], [1, 2, 3, 4, 5]]


async def test_batches_never_exceed_the_maximum() -> None:
    sizes: list[int] = []
    gate = anyio.Event()

    async def flush(items: list[int]) -> list[int]:
        sizes.append(len(items))
        await gate.wait()
        return items

    batcher = Batcher(flush, max_batch=3)
    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.run)
        for i in range(10):
            tg.start_soon(batcher.submit, i)
        await anyio.wait_all_tasks_blocked()
        gate.set()
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert max(sizes) <= 3 and sum(sizes) == 10


async def test_a_failed_flush_fails_every_request_in_it_and_the_batcher_goes_on() -> None:
    calls = 0

    async def flush(items: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("database went away")
        return items

    batcher = Batcher(flush, max_batch=10)
    async with anyio.create_task_group() as tg:
        tg.start_soon(batcher.run)
        with pytest.raises(ConnectionError):
            await batcher.submit(1)
        assert await batcher.submit(2) == 2
        tg.cancel_scope.cancel()
