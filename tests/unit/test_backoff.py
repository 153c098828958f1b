import math

import pytest

from realtime_dispatch.outbox.backoff import JITTER, backoff_delay


def delay(attempt: int, rand: float = 0.0, **kw: float) -> float:
    params = {"base": 2.0, "factor": 2.0, "cap": 120.0} | kw
    return backoff_delay(attempt, rand=lambda: rand, **params)


def test_grows_exponentially_from_base() -> None:
    assert [delay(n) for n in range(1, 6)] == pytest.approx([2.0, 4.0, 8.0, 16.0, 32.0])


def test_capped() -> None:
    assert delay(7) == 120.0  # 2 * 2**6 = 128 > cap
    assert delay(50) == 120.0


def test_huge_attempt_counts_do_not_overflow() -> None:
    assert delay(10_000_000, factor=10.0) == 120.0


def test_jitter_only_shortens_within_bounds() -> None:
    assert delay(3, rand=0.999999) == pytest.approx(8.0 * (1 - JITTER * 0.999999))
    assert delay(3, rand=0.5) < delay(3, rand=0.0)
    assert delay(50, rand=1.0) == pytest.approx(120.0 * (1 - JITTER))


def test_factor_one_is_constant() -> None:
    assert {delay(n, factor=1.0) for n in range(1, 20)} == {2.0}


def test_attempt_starts_at_one() -> None:
    with pytest.raises(ValueError, match="attempt"):
        delay(0)


def test_matches_closed_form() -> None:
    for n in range(1, 12):
        assert delay(n) == pytest.approx(min(120.0, 2.0 * math.pow(2.0, n - 1)))
