"""The retry schedule: exponential, jittered, capped."""

from __future__ import annotations

import random

from notifier.delivery.retries import Backoff, Throttle

SCHEDULE = Backoff(base=60.0, factor=5.0, ceiling=900.0, jitter=0.2)


def test_nominal_schedule_is_one_five_then_fifteen_minutes_capped() -> None:
    assert [SCHEDULE.nominal(n) for n in range(1, 6)] == [60.0, 300.0, 900.0, 900.0, 900.0]


def test_jitter_stays_within_its_fraction_of_the_nominal_delay() -> None:
    rng = random.Random(7)
    delays = [SCHEDULE.delay(1, rng) for _ in range(1000)]
    assert min(delays) >= 48.0 and max(delays) <= 72.0
    assert max(delays) - min(delays) > 10.0  # it really spreads


def test_jittered_delay_never_exceeds_the_ceiling() -> None:
    rng = random.Random(3)
    assert max(SCHEDULE.delay(n, rng) for n in range(1, 50) for _ in range(20)) <= 900.0


def test_huge_retry_numbers_do_not_overflow() -> None:
    assert SCHEDULE.nominal(10_000) == 900.0


def test_a_throttle_waits_seconds_doubling_with_each_in_a_row_up_to_its_ceiling() -> None:
    throttle = Throttle(base=1.0, ceiling=30.0, jitter=0.0)
    assert [throttle.throttled() for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_each_send_that_goes_through_halves_the_wait_until_none_is_left() -> None:
    throttle = Throttle(base=1.0, ceiling=30.0, jitter=0.0)
    for _ in range(4):
        throttle.throttled()
    waits = []
    for _ in range(5):
        throttle.sent()
        waits.append(throttle.wait)
    assert waits == [4.0, 2.0, 1.0, 0.0, 0.0]
    assert throttle.throttled() == 1.0
