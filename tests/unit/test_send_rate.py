"""The send rate's token bucket (pure, on an injected clock): a burst, then the rate, the wait
until the next token, a repeat's token given back, one user's bucket apart from another's, and
memory that follows the users sending now."""

from __future__ import annotations

from uuid import uuid4

import pytest

from realtime_dispatch.messenger.api.send_rate import SendLimiter, SendRate, retry_after


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_rate() -> None:
    clock = Clock()
    limiter = SendLimiter(SendRate(rate=10.0, burst=30), clock)
    alice, bob = uuid4(), uuid4()
    assert [limiter.take(alice) for _ in range(30)] == [0.0] * 30
    wait = limiter.take(alice)
    assert wait == pytest.approx(0.1)
    assert limiter.take(bob) == 0.0  # another user's bucket is full
    clock.now += 0.05
    assert limiter.take(alice) == pytest.approx(0.05)  # a refusal takes nothing
    clock.now += 0.05
    assert limiter.take(alice) == 0.0
    assert limiter.take(alice) > 0
    clock.now += 1.0  # ten more a second, never more than the burst
    assert [limiter.take(alice) for _ in range(10)] == [0.0] * 10
    assert limiter.take(alice) > 0
    clock.now += 3600
    assert sum(limiter.take(alice) == 0.0 for _ in range(40)) == 30


def test_a_repeat_gives_its_token_back() -> None:
    limiter = SendLimiter(SendRate(rate=1.0, burst=2), Clock())
    user = uuid4()
    assert limiter.take(user) == 0.0
    limiter.give_back(user)
    assert [limiter.take(user) for _ in range(2)] == [0.0, 0.0]
    assert limiter.take(user) == pytest.approx(1.0)
    limiter.give_back(user)
    limiter.give_back(user)
    limiter.give_back(user)  # never above the burst
    assert [limiter.take(user) == 0.0 for _ in range(3)] == [True, True, False]


def test_full_buckets_are_swept_as_the_map_grows() -> None:
    clock = Clock()
    limiter = SendLimiter(SendRate(rate=10.0, burst=3), clock)
    for _ in range(5000):
        limiter.take(uuid4())
        clock.now += 0.01  # each bucket is full again 0.1 s after its one send
    assert len(limiter) < 1100
    busy = uuid4()
    for _ in range(3):
        limiter.take(busy)
    for _ in range(3000):
        limiter.take(uuid4())
        clock.now += 0.00001
    assert limiter.take(busy) > 0  # a bucket still refilling is kept


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (float("inf"), 1), (1.0, 0)])
def test_invalid_rates_are_refused(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match=r"rate|burst"):
        SendRate(rate, burst)


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    assert [retry_after(s) for s in (0.01, 0.1, 1.0, 1.01, 7.5)] == ["1", "1", "1", "2", "8"]
