"""Payloads on the channel: ids and pings are understood, anything else is ignored."""

from __future__ import annotations

import pytest

from notifier.delivery.listener import parse_payload


def test_ids_payload_gives_the_ids() -> None:
    assert parse_payload('{"v": 1, "ids": [3, 1, 2]}') == [3, 1, 2]


def test_ping_payload_gives_its_nonce() -> None:
    assert parse_payload('{"v": 1, "ping": "ab12"}') == "ab12"


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "not json",
        "[1, 2]",
        '{"v": 2, "ids": [1]}',
        '{"ids": [1]}',
        '{"v": 1, "ids": []}',
        '{"v": 1, "ids": [0]}',
        '{"v": 1, "ids": [-4]}',
        '{"v": 1, "ids": ["7"]}',
        '{"v": 1, "ids": [true]}',
        '{"v": 1, "ids": [1.5]}',
        '{"v": 1, "ids": "1,2"}',
        '{"v": 1, "ids": [' + ",".join(["1"] * 1001) + "]}",
    ],
)
def test_malformed_or_foreign_payloads_are_ignored(payload: str) -> None:
    assert parse_payload(payload) is None
