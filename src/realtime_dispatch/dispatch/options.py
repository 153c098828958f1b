"""The dispatcher's options, as values (read from ``REALTIME_DISPATCH_*`` by
:mod:`realtime_dispatch.settings`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.outbox.backoff import Backoff
from realtime_dispatch.values.bounds import PG_MILLISECONDS_MAX, TIMESTAMP_SPAN_MAX, bound_text

Check = tuple[Callable[[float], bool], str]
"""A rule of one option's value, and what the line that refuses it says."""

POSITIVE: Check = (lambda value: value > 0, "must be > 0")


def at_most(bound: float) -> Check:
    return (lambda value: value <= bound, bound_text(bound))


def _option(default: float, *checks: Check) -> Any:
    """A field with its default and the rules its value keeps (checked at construction)."""
    return field(default=default, metadata={"checks": checks})


@dataclass(frozen=True, slots=True)
class RealtimeDispatchOptions:
    """The dispatcher's options (the spec's ``RealtimeDispatchOptions``); durations in seconds.
    Each is ``REALTIME_DISPATCH_`` + its name, upper-cased."""

    polling_interval: float = _option(1.0, POSITIVE)
    batch_size: int = _option(200, POSITIVE)
    max_run_duration: float = _option(5.0, POSITIVE)
    """Below ``lock_ttl``; a pass's pushes are bounded by what is left of it."""
    max_attempts: int = _option(8, POSITIVE)
    backoff_base: float = _option(2.0, POSITIVE)
    backoff_factor: float = _option(2.0, (lambda value: value >= 1, "must be >= 1"))
    # next_attempt_at = now() + the delay: a timestamp (bounds.py).
    backoff_cap: float = _option(120.0, at_most(TIMESTAMP_SPAN_MAX))
    # The lock connection's idle_session_timeout, in milliseconds (database.py).
    lock_ttl: float = _option(30.0, POSITIVE, at_most(PG_MILLISECONDS_MAX))
    # The sweep's cut-off, now - RETENTION_DONE, becomes the floor of a time-ordered id.
    retention_done: float = _option(86_400.0, POSITIVE, at_most(TIMESTAMP_SPAN_MAX))
    listen: bool = True
    linger: float = 0.003
    """After a batch that was not full, wait this long before the next claim of the pass: under
    a steady stream the next claim then finds a few rows instead of one (claims, payload queries
    and outcome writes per row fall), at the cost of at most this much added latency."""
    partitions: int = _option(1, (lambda value: 1 <= value <= 256, "must be between 1 and 256"))
    """How many partitions the outbox is claimed in (each with its own lock); 1 is the spec's
    single runner."""

    def __post_init__(self) -> None:
        # ``inf`` passes every comparison below and then overflows in the worker (a lock TTL
        # in milliseconds, a timestamp plus a backoff): every number must be finite.
        checks: list[tuple[str, bool, str]] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float):
                checks.append((f.name, math.isfinite(value), "must be a finite number"))
        for f in fields(self):
            value = getattr(self, f.name)
            checks += [(f.name, ok(value), text) for ok, text in f.metadata.get("checks", ())]
        # Between two options.
        checks += [
            ("backoff_cap", self.backoff_cap >= self.backoff_base, "must be >= BACKOFF_BASE"),
            (
                "max_run_duration",
                self.max_run_duration < self.lock_ttl,
                f"must be below REALTIME_DISPATCH_LOCK_TTL ({self.lock_ttl:g} s)",
            ),
            (
                "linger",
                0 <= self.linger < self.max_run_duration,
                "must be >= 0 and below REALTIME_DISPATCH_MAX_RUN_DURATION",
            ),
        ]
        for name, ok, message in checks:
            if not ok:
                raise ConfigurationError(f"REALTIME_DISPATCH_{name.upper()}", message)

    @property
    def backoff(self) -> Backoff:
        return Backoff(self.backoff_base, self.backoff_factor, self.backoff_cap)
