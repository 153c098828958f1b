"""The dispatcher's options, as values (read from ``REALTIME_DISPATCH_*`` by
:mod:`realtime_dispatch.settings`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.outbox.backoff import Backoff
from realtime_dispatch.values.bounds import PG_MILLISECONDS_MAX, TIMESTAMP_SPAN_MAX, bound_text


@dataclass(frozen=True, slots=True)
class RealtimeDispatchOptions:
    """The dispatcher's options (the spec's ``RealtimeDispatchOptions``); durations in seconds."""

    polling_interval: float = 1.0
    batch_size: int = 200
    max_run_duration: float = 5.0
    max_attempts: int = 8
    backoff_base: float = 2.0
    backoff_factor: float = 2.0
    backoff_cap: float = 120.0
    lock_ttl: float = 30.0
    retention_done: float = 86_400.0
    listen: bool = True
    linger: float = 0.003
    """After a batch that was not full, wait this long before the next claim of the pass: under
    a steady stream the next claim then finds a few rows instead of one (claims, payload queries
    and outcome writes per row fall), at the cost of at most this much added latency."""
    partitions: int = 1
    """How many partitions the outbox is claimed in (each with its own lock); 1 is the spec's
    single runner."""

    def __post_init__(self) -> None:
        # ``inf`` passes every comparison below and then overflows in the worker (a lock TTL
        # in milliseconds, a timestamp plus a backoff): every number must be finite.
        checks: list[tuple[str, bool, str]] = [
            (f.name.upper(), math.isfinite(getattr(self, f.name)), "must be a finite number")
            for f in fields(self)
            if isinstance(getattr(self, f.name), float)
        ]
        checks += [
            ("POLLING_INTERVAL", self.polling_interval > 0, "must be > 0"),
            ("BATCH_SIZE", self.batch_size > 0, "must be > 0"),
            ("MAX_RUN_DURATION", self.max_run_duration > 0, "must be > 0"),
            ("MAX_ATTEMPTS", self.max_attempts > 0, "must be > 0"),
            ("BACKOFF_BASE", self.backoff_base > 0, "must be > 0"),
            ("BACKOFF_FACTOR", self.backoff_factor >= 1, "must be >= 1"),
            ("BACKOFF_CAP", self.backoff_cap >= self.backoff_base, "must be >= BACKOFF_BASE"),
            # next_attempt_at = now() + the delay: a timestamp (bounds.py).
            (
                "BACKOFF_CAP",
                self.backoff_cap <= TIMESTAMP_SPAN_MAX,
                bound_text(TIMESTAMP_SPAN_MAX),
            ),
            ("LOCK_TTL", self.lock_ttl > 0, "must be > 0"),
            # The lock connection's idle_session_timeout, in milliseconds (database.py).
            ("LOCK_TTL", self.lock_ttl <= PG_MILLISECONDS_MAX, bound_text(PG_MILLISECONDS_MAX)),
            (
                "MAX_RUN_DURATION",
                self.max_run_duration < self.lock_ttl,
                f"must be below REALTIME_DISPATCH_LOCK_TTL ({self.lock_ttl:g} s)",
            ),
            ("RETENTION_DONE", self.retention_done > 0, "must be > 0"),
            # The sweep's cut-off, now - RETENTION_DONE, becomes the floor of a time-ordered id.
            (
                "RETENTION_DONE",
                self.retention_done <= TIMESTAMP_SPAN_MAX,
                bound_text(TIMESTAMP_SPAN_MAX),
            ),
            ("PARTITIONS", 1 <= self.partitions <= 256, "must be between 1 and 256"),
            (
                "LINGER",
                0 <= self.linger < self.max_run_duration,
                "must be >= 0 and below REALTIME_DISPATCH_MAX_RUN_DURATION",
            ),
        ]
        for name, ok, message in checks:
            if not ok:
                raise ConfigurationError(f"REALTIME_DISPATCH_{name}", message)

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.backoff_base, self.backoff_factor, self.backoff_cap)
