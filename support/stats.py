"""Latency statistics, one definition for the tests and the benchmarks."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 ≤ q ≤ 1) of ``values``, in any order; NaN if empty."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def percentiles(
    values: Iterable[float],
    quantiles: Sequence[float] = (0.5, 0.95, 0.99),
    *,
    digits: int | None = None,
) -> dict[str, float]:
    """``{"p50": …, "p95": …, "p99": …, "max": …}`` of ``values`` (``quantiles`` name the
    keys), each rounded to ``digits`` if given; empty if there are no values."""
    ordered = sorted(values)
    if not ordered:
        return {}
    found = {f"p{q * 100:g}": percentile(ordered, q) for q in quantiles}
    found["max"] = ordered[-1]
    if digits is None:
        return found
    return {key: round(value, digits) for key, value in found.items()}
