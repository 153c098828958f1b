"""How often one user may call ``WatchPresence`` on one replica (pure): a token bucket per user.

:data:`WATCH_RATE` calls a second refill a bucket of :data:`WATCH_BURST`; each call takes one,
and with none left the call is answered with an error (:data:`RATE_LIMITED`), nothing read. A
client watches when it opens a view and again after each reconnect (the SDKs do that for the
ids they remember): a burst of ten covers a reconnect and a few views at once, and two a second
after that leaves a flood of a user's connections (each asking for 500 ids) no more than two
watches a second on a replica, wherever it comes from. Full buckets are swept as the map grows:
memory follows the users watching right now.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from realtime_dispatch.values.keys import Key

WATCH_RATE = 2.0
WATCH_BURST = 10
RATE_LIMITED = (
    "WatchPresence refused: at most {burst} at once and {rate:g} a second per user;"
    " try again in {wait:.1f} s."
)
_FIRST_SWEEP = 1024
_EPSILON = 1e-9


class WatchRate:
    """Token buckets by user; ``clock`` (monotonic seconds) injected for the tests."""

    __slots__ = ("_buckets", "_clock", "_sweep_at", "burst", "rate")

    def __init__(
        self,
        rate: float = WATCH_RATE,
        burst: int = WATCH_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(rate) and rate > 0) or burst < 1:
            raise ValueError("rate: must be > 0, burst: at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[Key, tuple[float, float]] = {}  # user → (tokens, as of)
        self._sweep_at = _FIRST_SWEEP

    def _tokens(self, user: Key, now: float) -> float:
        tokens, since = self._buckets.get(user, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - since) * self.rate)

    def refusal(self, user: Key) -> str | None:
        """Take a token for ``user``: None when taken, else the error to answer."""
        now = self._clock()
        tokens = self._tokens(user, now)
        if tokens < 1.0 - _EPSILON:
            self._buckets[user] = (tokens, now)
            wait = (1.0 - tokens) / self.rate
            return RATE_LIMITED.format(burst=self.burst, rate=self.rate, wait=wait)
        self._buckets[user] = (max(0.0, tokens - 1.0), now)
        if len(self._buckets) >= self._sweep_at:
            full = [u for u in self._buckets if self._tokens(u, now) >= self.burst - _EPSILON]
            for user_id in full:
                del self._buckets[user_id]
            self._sweep_at = max(_FIRST_SWEEP, 2 * len(self._buckets))
        return None

    def __len__(self) -> int:
        return len(self._buckets)
