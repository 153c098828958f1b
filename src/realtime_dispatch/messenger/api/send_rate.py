"""The send rate (pure): a token bucket per user for message sends and edits.

``REALTIME_API_SEND_RATE`` tokens a second refill a bucket of ``REALTIME_API_SEND_BURST``;
a send or an edit takes one, and with none left the answer is 429 with ``Retry-After``. The
buckets live in this process: behind N replicas a user may send N times the rate (documented
in docs/reference.md). A bucket that has filled up again holds nothing worth keeping, so full
buckets are swept away as the map grows: memory follows the users sending right now.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

_FIRST_SWEEP = 1024
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class SendRate:
    """Messages a second per user, and how many may go at once after a pause."""

    rate: float = 10.0
    burst: int = 30

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError("rate: must be a positive number")
        if self.burst < 1:
            raise ValueError("burst: must be at least 1")


class SendLimiter:
    """Token buckets by user. ``clock`` is injected (monotonic seconds) for the tests."""

    __slots__ = ("_buckets", "_clock", "_sweep_at", "rate")

    def __init__(self, rate: SendRate, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._buckets: dict[UUID, tuple[float, float]] = {}  # user → (tokens, as of)
        self._sweep_at = _FIRST_SWEEP

    def _tokens(self, user: UUID, now: float) -> float:
        tokens, since = self._buckets.get(user, (float(self.rate.burst), now))
        return min(float(self.rate.burst), tokens + (now - since) * self.rate.rate)

    def take(self, user: UUID) -> float:
        """Take a token: 0.0 when taken, else the seconds until one is there (nothing taken)."""
        now = self._clock()
        tokens = self._tokens(user, now)
        if tokens < 1.0 - _EPSILON:  # float steps of the clock must not refuse a whole token
            self._buckets[user] = (tokens, now)
            return (1.0 - tokens) / self.rate.rate
        self._buckets[user] = (max(0.0, tokens - 1.0), now)
        if len(self._buckets) >= self._sweep_at:
            self._sweep(now)
        return 0.0

    def give_back(self, user: UUID) -> None:
        """Return the token of a send that wrote nothing (an idempotent repeat)."""
        now = self._clock()
        self._buckets[user] = (min(float(self.rate.burst), self._tokens(user, now) + 1.0), now)

    def _sweep(self, now: float) -> None:
        full = float(self.rate.burst)
        self._buckets = {u: b for u, b in self._buckets.items() if self._tokens(u, now) < full}
        self._sweep_at = max(_FIRST_SWEEP, 2 * len(self._buckets))

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after(seconds: float) -> str:
    """``Retry-After`` in whole seconds (RFC 9110 delay-seconds), at least 1."""
    return str(max(1, math.ceil(seconds)))
