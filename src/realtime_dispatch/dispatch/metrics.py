"""The dispatcher's Prometheus metrics, with the spec's names, on a registry the caller owns."""

from __future__ import annotations

import collections
from bisect import bisect_left
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LAG_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0,
)  # fmt: skip


class DispatchMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.pending = Gauge(
            "messenger_realtime_pending", "Pending outbox rows (backlog).", registry=registry
        )
        self.quarantined_rows = Gauge(
            "messenger_realtime_quarantined_rows",
            "Quarantined outbox rows standing (waiting for an operator).",
            registry=registry,
        )
        self.lag = Histogram(
            "messenger_realtime_lag_seconds",
            "Persist-to-push lag: now - created_at when a row turns Done.",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.dispatched = Counter(
            "messenger_realtime_dispatched",
            "Rows pushed and marked Done.",
            ["kind"],
            registry=registry,
        )
        self.retried = Counter(
            "messenger_realtime_retried",
            "Rows whose push failed transiently and stay Pending for a retry.",
            ["kind"],
            registry=registry,
        )
        self.quarantined = Counter(
            "messenger_realtime_quarantined",
            "Rows quarantined (poison or permanent failure).",
            ["kind"],
            registry=registry,
        )
        self.target_gone = Counter(
            "messenger_realtime_target_gone",
            "Rows marked Done without a push because their target no longer exists.",
            ["kind"],
            registry=registry,
        )
        self.media_unconfigured = Counter(
            "messenger_realtime_media_unconfigured",
            "Invites (call_invited, conference_invited, conference_started) delivered without"
            " a media join: no REALTIME_MEDIA_JITSI_APP_SECRET in this process.",
            ["kind"],
            registry=registry,
        )
        self.superseded = Counter(
            "messenger_realtime_superseded",
            "Outcomes not written: the row_version moved since the claim (a failover, an"
            " expired lease, an operator's requeue), so the row is no longer this pass's.",
            registry=registry,
        )
        self.passes = Counter(
            "messenger_realtime_passes",
            "Dispatcher passes by result (ran, skipped_locked, failed).",
            ["result"],
            registry=registry,
        )
        self.last_pass = Gauge(
            "messenger_realtime_last_pass_timestamp_seconds",
            "Unix time of the last pass that held the lock and completed.",
            registry=registry,
        )
        self.errors = Counter(
            "messenger_realtime_dispatch_errors",
            "Failures of the dispatcher itself (database unavailable, listener lost, ...).",
            ["reason"],
            registry=registry,
        )
        self.database_available = Gauge(
            "messenger_realtime_database_available",
            "1 while the dispatcher reaches PostgreSQL, 0 during an outage (backing off).",
            registry=registry,
        )
        self.purged = Counter(
            "messenger_realtime_purged",
            "Done rows deleted by retention.",
            registry=registry,
        )


def observe_all(histogram: Histogram, values: Sequence[float]) -> None:
    """``histogram.observe(v)`` for every value, with each bucket and the sum incremented once
    (a batch's lags: one call instead of one per row). Uses prometheus_client's own bucket list
    (``_upper_bounds``, ``_buckets``, ``_sum`` of an unlabelled histogram); without them, observes
    one by one."""
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if not values:
        return
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:
            histogram.observe(value)
        return
    # The first bucket whose upper bound is >= the value, as observe() picks it.
    for index, count in collections.Counter(bisect_left(bounds, value) for value in values).items():
        buckets[index].inc(count)
    total.inc(sum(values))
