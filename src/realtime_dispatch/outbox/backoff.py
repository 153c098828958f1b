"""Retry delay: ``min(cap, base * factor**(attempt-1))``, shortened by up to :data:`JITTER`.

The cap is a true upper bound; jitter only spreads retries of rows that failed together (a hub
outage fails a whole batch at once) so they do not come back as one burst. The claim statement
computes the same formula in SQL (``outbox/queries.sql``, ``claim``), overflow-safe in log space;
``tests/integration/test_claim.py`` checks the two agree.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

JITTER = 0.2


@dataclass(frozen=True, slots=True)
class Backoff:
    """The retry schedule the claim applies (seconds); the dispatcher's options carry one."""

    base: float = 2.0
    factor: float = 2.0
    cap: float = 120.0

    def delay(self, attempt: int, *, rand: Callable[[], float] = random.random) -> float:
        return backoff_delay(attempt, base=self.base, factor=self.factor, cap=self.cap, rand=rand)


def backoff_delay(
    attempt: int,
    *,
    base: float,
    factor: float,
    cap: float,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to wait before attempt ``attempt + 1``, given that ``attempt`` (>= 1) was made."""
    if attempt < 1:
        raise ValueError("attempt starts at 1")
    exponent = (attempt - 1) * math.log(factor)
    raw = cap if exponent >= math.log(cap / base) else base * math.exp(exponent)
    return raw * (1.0 - JITTER * rand())
