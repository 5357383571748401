"""Coalescing batcher: many concurrent requests, one database round trip, no timer."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import anyio

In = TypeVar("In")
Out = TypeVar("Out")


class _Slot(Generic[In, Out]):
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: In) -> None:
        self.item = item
        self.done = anyio.Event()
        self.result: Out | None = None
        self.error: BaseException | None = None


class Batcher(Generic[In, Out]):
    """Runs `flush` over whatever requests are waiting, one flush at a time.

    An idle batcher flushes a lone request at once; requests that arrive while a flush is in
    flight wait for it and then go together in the next one, up to `max_batch`. Batches grow
    with load and cost nothing when idle: no timer ever holds a request back.

    `flush` returns one result per item, in order. If it raises, every request in that batch
    gets the exception. Lifecycle: `run()` must be running (in a task group) for `submit()`
    to be answered; cancel it once no more requests will come.
    """

    def __init__(
        self, flush: Callable[[list[In]], Awaitable[Sequence[Out]]], max_batch: int
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._waiting: deque[_Slot[In, Out]] = deque()
        self._wake: anyio.Event | None = None

    async def submit(self, item: In) -> Out:
        slot: _Slot[In, Out] = _Slot(item)
        self._waiting.append(slot)
        if self._wake is not None:
            self._wake.set()
        await slot.done.wait()
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    async def run(self) -> None:
        while True:
            if not self._waiting:
                self._wake = anyio.Event()
                await self._wake.wait()
                self._wake = None
            count = min(len(self._waiting), self._max_batch)
            batch = [self._waiting.popleft() for _ in range(count)]
            try:
                results = await self._flush([slot.item for slot in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"flush returned {len(results)} results for {len(batch)}")
            except Exception as exc:
                for slot in batch:
                    slot.error = exc
                    slot.done.set()
                continue
            except BaseException:
                # Cancelled mid-flush: its requests must not wait forever.
                for slot in batch:
                    slot.error = anyio.get_cancelled_exc_class()()
                    slot.done.set()
                raise
            for slot, result in zip(batch, results, strict=True):
                slot.result = result
                slot.done.set()
