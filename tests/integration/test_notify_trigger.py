"""The insert trigger announces new outbox ids in few, small notifications, only on commit."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import asyncpg
import orjson
import pytest

from notifier.storage.database import connect
from tests.support.rows import insert_deliveries, insert_outbox, insert_verifications

pytestmark = pytest.mark.anyio

CHANNEL = "notifier_outbox_v1"
PAYLOAD_LIMIT_BYTES = 8000
SENTINEL = "sentinel"


class Notifications:
    """Payloads received on the channel by a dedicated listening connection."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.arrived = anyio.Event()

    def __call__(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self.payloads.append(payload)
        self.arrived.set()

    def ids(self) -> list[int]:
        return [i for p in self.payloads if p != SENTINEL for i in orjson.loads(p)["ids"]]

    async def wait_for_ids(self, expected: set[int]) -> None:
        with anyio.fail_after(10):
            while set(self.ids()) < expected:
                self.arrived = anyio.Event()
                await self.arrived.wait()


@pytest.fixture
async def notifications(database_url: str) -> Any:
    listener = await connect(database_url)
    received = Notifications()
    await listener.add_listener(CHANNEL, received)
    yield received
    await listener.close()


async def test_bulk_insert_of_500_rows_emits_a_bounded_number_of_notifications(
    db: asyncpg.Connection, notifications: Notifications
) -> None:
    ids = await insert_deliveries(db, 500)
    await notifications.wait_for_ids(set(ids))
    assert sorted(notifications.ids()) == sorted(ids)
    assert len(notifications.payloads) <= 2
    assert all(len(p.encode()) < PAYLOAD_LIMIT_BYTES for p in notifications.payloads)


async def test_payload_is_versioned_json_of_ids(
    db: asyncpg.Connection, notifications: Notifications
) -> None:
    ids = await insert_deliveries(db, 3)
    await notifications.wait_for_ids(set(ids))
    assert orjson.loads(notifications.payloads[0]) == {"v": 1, "ids": sorted(ids)}


async def test_rolled_back_insert_notifies_nobody(
    db: asyncpg.Connection, notifications: Notifications
) -> None:
    tx = db.transaction()
    await tx.start()
    await insert_outbox(db, await insert_verifications(db, 5))
    await tx.rollback()
    # A later committed insert arrives alone: the rolled-back ids never do.
    later = await insert_deliveries(db, 1)
    await notifications.wait_for_ids(set(later))
    assert notifications.ids() == later


async def test_nothing_is_announced_before_commit(
    db: asyncpg.Connection, database_url: str, notifications: Notifications
) -> None:
    other = await connect(database_url)
    try:
        async with db.transaction():
            ids = await insert_outbox(db, await insert_verifications(db, 2))
            # Delivery follows commit order: once a sentinel committed after the insert
            # arrives, anything the open transaction had leaked would have arrived first.
            await other.execute("SELECT pg_notify($1, $2)", CHANNEL, SENTINEL)
            with anyio.fail_after(10):
                while SENTINEL not in notifications.payloads:
                    notifications.arrived = anyio.Event()
                    await notifications.arrived.wait()
            assert notifications.payloads == [SENTINEL]
        await notifications.wait_for_ids(set(ids))
    finally:
        await other.close()


async def test_scheduled_rows_are_not_announced(
    db: asyncpg.Connection, notifications: Notifications
) -> None:
    async with db.transaction():
        await insert_outbox(db, await insert_verifications(db, 2), timedelta(hours=1))
    due = await insert_deliveries(db, 1)
    await notifications.wait_for_ids(set(due))
    assert notifications.ids() == due
