"""The dispatcher's Prometheus metrics, with the spec's names, on a registry the caller owns."""

from __future__ import annotations

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
        self.purged = Counter(
            "messenger_realtime_purged",
            "Done rows deleted by retention.",
            registry=registry,
        )
