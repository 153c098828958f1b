"""Pushes after the membership they depend on: :class:`OrderedDelivery`, the one delivery path
of pushes made in this process and of pushes received from the backplane.

A push to a chat group is fanned out only once every membership change committed before it has
been applied to the group registry (the membership barrier of :class:`~.feed.MembershipFeed`):
a member added before a message gets it, one removed before it does not. Pushes to other groups
(a user's own) need no barrier.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import structlog

from realtime_dispatch.hub.connections.fanout import GroupFrames
from realtime_dispatch.hub.connections.registry import CHAT_PREFIX
from realtime_dispatch.hub.membership.feed import MembershipFeed
from realtime_dispatch.hub.metrics import HubMetrics

log = structlog.get_logger(__name__)

PushSource = Literal["local", "backplane"]
LOCAL: PushSource = "local"
BACKPLANE: PushSource = "backplane"


class OrderedDelivery:
    def __init__(
        self,
        membership: MembershipFeed,
        send_to_groups: Callable[[GroupFrames], int],
        metrics: HubMetrics,
        *,
        barrier_timeout: float,
    ) -> None:
        self._membership = membership
        self._send_to_groups = send_to_groups
        self._barrier_timeout = barrier_timeout
        self._pushes = {source: metrics.pushes.labels(source) for source in (LOCAL, BACKPLANE)}
        """The pushes counter by source, its labelled children looked up once."""
        self._barriers_marked = metrics.membership_barriers.labels("marked")
        self._barriers_waited = metrics.membership_barriers.labels("round_trip")

    async def deliver(
        self, items: GroupFrames, marks: Sequence[str] = (), *, source: PushSource = LOCAL
    ) -> bool:
        """Fan out serialised records to this replica's members, after the membership barrier
        when a chat is among their groups. ``source``: ``local`` (through the in-process
        publisher) or ``backplane``. ``marks``: the worker's membership marks the pushes carry;
        when the feed has applied one of them, the barrier is already passed.

        False when the barrier could not be passed (the membership feed is down). A local push
        is then not delivered: its publisher reports it unavailable and the dispatcher retries
        it. A push from the backplane is delivered anyway, with a warning: nobody could retry it.
        """
        ordered = True
        for group, _ in items:
            if group.startswith(CHAT_PREFIX):
                ordered = False
                break
        if not ordered and marks and self._membership.heard(marks):
            ordered = True
            self._barriers_marked.inc()
        elif not ordered:
            ordered = await self._membership.barrier(self._barrier_timeout)
            self._barriers_waited.inc()
        if not ordered:
            if source == LOCAL:
                return False
            log.warning("membership_barrier_timeout", pushes=len(items))
        self._send_to_groups(items)
        self._pushes[source].inc(len(items))
        return ordered
