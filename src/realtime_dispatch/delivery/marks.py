"""The membership mark: how a worker tells the hubs that a batch needs no membership barrier.

A hub orders a push after the membership changes committed before it with a round trip on its
membership feed (:meth:`~realtime_dispatch.hub.membership.feed.MembershipFeed.barrier`): one
per batch on every replica. A worker whose claims run on a connection that listens on
``realtime_membership`` can vouch for that instead, without a round trip: when a claim returns,
every change committed before the claimed rows has been notified to that connection (PostgreSQL
sends a session the notifications it was signalled before it reports a query done, and asyncpg
runs the listener callbacks before the query's caller resumes; the hub's barrier rests on the
same rule).

The marks are barrier notifications, ``{"barrier": token}``, on that channel: they take their
place in the one order in which every listener hears the channel. The worker's runner sends
one when it has none, and every :data:`REFRESH_EVERY` seconds. :class:`MembershipMark` keeps
the tokens its connection heard since the last membership change it heard; a batch published
during a pass carries them (the dispatcher reads them when it publishes a slice and hands them
to :meth:`~realtime_dispatch.delivery.push.HubPublisher.publish` as ``marks``). A hub whose
feed has applied one of them has applied every change notified before it, so every change the
batch's rows can depend on: it skips its barrier. A hub that has not heard any of them (it
just started, its feed lags) runs its barrier as before. A mark only ever saves a round trip; a
missing or unknown one costs one.
In ``serve`` the in-process publisher hands the marks to the hub beside it the same way; a
worker that pushes over HTTP sends them in its batch's body (``"marks"``, :func:`received_marks`).

Pure: the runner does the listening and the sending.
"""

from __future__ import annotations

import time
import uuid

import orjson

REFRESH_EVERY = 5.0
"""Seconds between the marks a runner sends while nothing changes: a hub that starts (and so
has heard none of the older ones) skips its barriers again within this time."""

KEEP = 2
"""Tokens a batch carries: the newest, and the one before it (which a hub has heard for longer,
when the newest raced the batch)."""


MAX_RECEIVED = 8
"""Tokens a batch from another process may carry (a worker sends :data:`KEEP`)."""
MAX_TOKEN_CHARS = 64


def received_marks(value: object) -> tuple[str, ...] | None:
    """The marks of a batch received from another process (the HTTP batch body's ``"marks"``):
    None when ``value`` is not an array of at most :data:`MAX_RECEIVED` non-empty strings of at
    most :data:`MAX_TOKEN_CHARS`. A token the hub never heard only costs its barrier."""
    if not isinstance(value, list) or len(value) > MAX_RECEIVED:
        return None
    for token in value:
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_CHARS:
            return None
    return tuple(value)


def parse_barrier(payload: str) -> str | None:
    """The token of a barrier notification on ``realtime_membership`` (a membership mark, or
    an interest-routed publisher's barrier); None for anything else."""
    if not payload.startswith('{"barrier"'):
        return None
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    token = value.get("barrier") if isinstance(value, dict) else None
    return token if isinstance(token, str) and token else None


def barrier_payload(token: str) -> str:
    return orjson.dumps({"barrier": token}).decode()


def new_token() -> str:
    return "m" + uuid.uuid4().hex


class MembershipMark:
    """What one connection heard on ``realtime_membership``: the barrier tokens since the last
    membership change (newest last), valid while that connection listens."""

    def __init__(self, *, refresh_every: float = REFRESH_EVERY) -> None:
        self._tokens: tuple[str, ...] = ()
        self.refresh_every = refresh_every
        self._heard_at = -refresh_every

    @property
    def tokens(self) -> tuple[str, ...]:
        """The tokens a batch published now may carry; empty when the hubs must use their
        barrier (a change was heard since the last token, or nothing yet)."""
        return self._tokens

    def notified(self, payload: str) -> None:
        """A notification on the listening connection, in the order it arrived."""
        token = parse_barrier(payload)
        if token is None:
            # A membership change (or a payload this version does not know): the batches of
            # rows committed after it need a token heard after it.
            self._tokens = ()
            return
        self._tokens = (*self._tokens[-(KEEP - 1) :], token)
        self._heard_at = time.monotonic()

    def lost(self) -> None:
        """The connection stopped listening (closed, replaced): what it heard says nothing about
        what the next one missed."""
        self._tokens = ()

    def due(self, now: float | None = None) -> bool:
        """Should a new token be sent? (None held, or the newest is older than the refresh.)"""
        now = time.monotonic() if now is None else now
        return not self._tokens or now - self._heard_at >= self.refresh_every
