"""Hub metrics on a :class:`~prometheus_client.CollectorRegistry` the caller owns (never the
global one), so the hub and the dispatcher can share one ``/metrics``."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from realtime_dispatch.hub.connections.session import CloseReason

TYPING_OUTCOMES = ("sent", "throttled", "refused", "received", "invalid", "dropped")
PRESENCE_EVENTS = ("watched", "unwatched", "refused", "online", "offline", "swept", "dropped")


class HubMetrics:
    __slots__ = (
        "connections",
        "disconnects",
        "membership_barriers",
        "negotiations_evicted",
        "presence",
        "presence_watches",
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
        self.disconnects = _counter(
            "messenger_realtime_hub_disconnects",
            "Hub connections ended, by reason.",
            "reason",
            [reason.value for reason in CloseReason],
            registry,
        )
        self.sent_frames = Counter(
            "messenger_realtime_hub_sent_frames",
            "Hub protocol records written to clients (invocations, pings, acks, close).",
            registry=registry,
        )
        self.pushes = _counter(
            "messenger_realtime_hub_pushes",
            "Group sends delivered to this replica's connections, by source.",
            "source",
            ("local", "backplane"),
            registry,
        )
        self.refused = _counter(
            "messenger_realtime_hub_refused_connections",
            "Connections and negotiations refused by the per-user cap or a full negotiation"
            " store, by code (TooManyConnections; TooManyNegotiations is no longer counted: a"
            " full store pushes out its oldest negotiation instead).",
            "code",
            ("TooManyConnections", "TooManyNegotiations"),
            registry,
        )
        self.membership_barriers = _counter(
            "messenger_realtime_hub_membership_barriers",
            "Batches with a chat group ordered after the membership changes before them, by how:"
            " round_trip (a query on the membership feed) or marked (the feed had applied one of"
            " the worker's membership marks the batch carried).",
            "kind",
            ("round_trip", "marked"),
            registry,
        )
        self.negotiations_evicted = Counter(
            "messenger_realtime_hub_negotiations_evicted",
            "Pending negotiations pushed out because the store was full (the oldest first).",
            registry=registry,
        )
        self.typing = _counter(
            "messenger_realtime_hub_typing",
            "Typing invocations, by outcome: sent (fanned out), throttled (inside the typing"
            " interval, dropped), refused (not a member, or a bad argument); and the signals"
            " of other replicas: received (fanned out here), invalid (a malformed envelope),"
            " dropped (not published: the relay's queue was full, or Redis failed).",
            "outcome",
            TYPING_OUTCOMES,
            registry,
        )
        self.presence = _counter(
            "messenger_realtime_hub_presence",
            "Presence, by event: watched / unwatched (ids a WatchPresence / UnwatchPresence"
            " took), refused (an invocation answered with an error), online / offline"
            " (presence_changed this replica announced), swept (offline announced for the"
            " users of a replica that died without closing), dropped (an announcement not"
            " made: the presence store failed).",
            "event",
            PRESENCE_EVENTS,
            registry,
        )
        self.presence_watches = Gauge(
            "messenger_realtime_hub_presence_watches",
            "Watched (connection, user) pairs on this replica.",
            registry=registry,
        )


def _counter(
    name: str, documentation: str, label: str, values: Iterable[str], registry: CollectorRegistry
) -> Counter:
    """A counter by one ``label`` whose ``values`` are known: each is there at 0 from the start
    (a rate over one that has not moved yet is 0, not absent)."""
    counter = Counter(name, documentation, [label], registry=registry)
    for value in values:
        counter.labels(value)
    return counter
