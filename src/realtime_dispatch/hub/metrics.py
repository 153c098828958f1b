"""Hub metrics on a :class:`~prometheus_client.CollectorRegistry` the caller owns (never the
global one), so the hub and the dispatcher can share one ``/metrics``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from realtime_dispatch.hub.session import CloseReason


class HubMetrics:
    __slots__ = (
        "connections",
        "disconnects",
        "membership_barriers",
        "negotiations_evicted",
        "pushes",
        "refused",
        "sent_frames",
        "typing",
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        self.connections = Gauge(
            "messenger_realtime_hub_connections",
            "Hub connections, by state: open (handshake done, including ones waiting to resume)"
            " or handshake (transport opened, handshake not finished: a place held under the"
            " per-user cap).",
            ["state"],
            registry=registry,
        )
        self.disconnects = Counter(
            "messenger_realtime_hub_disconnects",
            "Hub connections ended, by reason.",
            ["reason"],
            registry=registry,
        )
        self.sent_frames = Counter(
            "messenger_realtime_hub_sent_frames",
            "Hub protocol records written to clients (invocations, pings, acks, close).",
            registry=registry,
        )
        self.pushes = Counter(
            "messenger_realtime_hub_pushes",
            "Group sends delivered to this replica's connections, by source.",
            ["source"],
            registry=registry,
        )
        self.refused = Counter(
            "messenger_realtime_hub_refused_connections",
            "Connections and negotiations refused by the per-user cap or a full negotiation"
            " store, by code (TooManyConnections; TooManyNegotiations is no longer counted: a"
            " full store pushes out its oldest negotiation instead).",
            ["code"],
            registry=registry,
        )
        self.membership_barriers = Counter(
            "messenger_realtime_hub_membership_barriers",
            "Batches with a chat group ordered after the membership changes before them, by how:"
            " round_trip (a query on the membership feed) or marked (the feed had applied one of"
            " the worker's membership marks the batch carried).",
            ["kind"],
            registry=registry,
        )
        self.negotiations_evicted = Counter(
            "messenger_realtime_hub_negotiations_evicted",
            "Pending negotiations pushed out because the store was full (the oldest first).",
            registry=registry,
        )
        self.typing = Counter(
            "messenger_realtime_hub_typing",
            "Typing invocations, by outcome: sent (fanned out), throttled (inside the typing"
            " interval, dropped), refused (not a member, or a bad argument).",
            ["outcome"],
            registry=registry,
        )
        for outcome in ("sent", "throttled", "refused"):
            self.typing.labels(outcome)
        for kind in ("round_trip", "marked"):
            self.membership_barriers.labels(kind)
        for code in ("TooManyConnections", "TooManyNegotiations"):
            self.refused.labels(code)
        for reason in CloseReason:
            self.disconnects.labels(reason.value)
        for source in ("local", "backplane"):
            self.pushes.labels(source)
