"""Connections and requests the HTTP layer refuses (per-address cap, headers too large or too
slow, a body too slow), counted and logged without flooding the log.

Every refusal counts in ``messenger_realtime_http_refusals_total{reason}``. The log gets at
most one line per reason and client address per :data:`LOG_INTERVAL`: the first refusal at
once (``count=1``), the ones after it in the interval as one line with their ``count`` when
the interval ends. :class:`RefusalLog` is the pure bookkeeping; :class:`HttpRefusals` ties it
to the counter, the logger and a timer of the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import StrEnum

import structlog
from prometheus_client import CollectorRegistry, Counter

log = structlog.get_logger(__name__)

LOG_INTERVAL = 10.0
MAX_TRACKED = 10_000
"""Addresses tracked per interval at most; past it refusals from new addresses are logged
together under the address ``*``."""
OTHERS = "*"


class RefusalReason(StrEnum):
    CLIENT_CAP = "client_cap"
    HEADERS_TOO_LARGE = "headers_too_large"
    HEADER_TIMEOUT = "header_timeout"
    BODY_TIMEOUT = "body_timeout"


EVENTS = {
    RefusalReason.CLIENT_CAP: "http_client_connection_cap",
    RefusalReason.HEADERS_TOO_LARGE: "http_headers_too_large",
    RefusalReason.HEADER_TIMEOUT: "http_header_timeout",
    RefusalReason.BODY_TIMEOUT: "http_body_timeout",
}
"""The log event of each reason."""

Key = tuple[RefusalReason, str]


class RefusalLog:
    """Which refusals to log now. ``emit(reason, address, count)`` writes one line."""

    __slots__ = ("_emit", "_interval", "_max_tracked", "_tracked")

    def __init__(
        self,
        emit: Callable[[RefusalReason, str, int], None],
        *,
        interval: float = LOG_INTERVAL,
        max_tracked: int = MAX_TRACKED,
    ) -> None:
        self._emit = emit
        self._interval = interval
        self._max_tracked = max_tracked
        self._tracked: dict[Key, list[float]] = {}
        """(reason, address) → [time of its last line, refusals not logged yet]."""

    def __len__(self) -> int:
        return len(self._tracked)

    def refused(self, reason: RefusalReason, address: str, now: float) -> None:
        key = (reason, address)
        entry = self._tracked.get(key)
        if entry is None and len(self._tracked) >= self._max_tracked:
            key = (reason, OTHERS)
            entry = self._tracked.get(key)
        if entry is None:
            self._tracked[key] = [now, 0]
            self._emit(reason, key[1], 1)
        else:
            entry[1] += 1

    def flush(self, now: float) -> None:
        """Log what has waited an interval since its last line; forget what has been quiet."""
        for key, entry in list(self._tracked.items()):
            logged_at, pending = entry
            if now - logged_at < self._interval:
                continue
            if pending:
                entry[0], entry[1] = now, 0
                self._emit(key[0], key[1], int(pending))
            else:
                del self._tracked[key]


class HttpRefusals:
    """The HTTP layer's refusals of one server: counter, throttled log, and its timer."""

    __slots__ = ("_counts", "_log", "_timer")

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        counter = Counter(
            "messenger_realtime_http_refusals",
            "Connections and requests refused by the HTTP server's limits, by reason"
            " (client_cap, headers_too_large, header_timeout, body_timeout).",
            ["reason"],
            registry=registry if registry is not None else CollectorRegistry(),
        )
        self._counts = {reason: counter.labels(reason.value) for reason in RefusalReason}
        self._log = RefusalLog(_emit)
        self._timer: asyncio.TimerHandle | None = None

    def refused(self, reason: RefusalReason, address: str | None) -> None:
        self._counts[reason].inc()
        loop = asyncio.get_running_loop()
        self._log.refused(reason, address or "-", loop.time())
        if self._timer is None:
            self._timer = loop.call_later(LOG_INTERVAL, self._tick)

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self._log.flush(loop.time())
        self._timer = loop.call_later(LOG_INTERVAL, self._tick) if len(self._log) else None


def _emit(reason: RefusalReason, address: str, count: int) -> None:
    log.warning(EVENTS[reason], client=address, count=count, interval=LOG_INTERVAL)
