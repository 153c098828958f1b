"""What a push is, and the seam between the dispatcher and the hub: :class:`HubPublisher`.

The JSON aliases and :class:`Push` live here, below both, so that neither imports the other.

The dispatcher never imports hub internals. It hands a publisher a slice of :class:`Push` values
(already in outbox order) and gets back one result per push: ``None`` for delivered/enqueued, or
the error for that push. Errors are classified by type (see :mod:`realtime_dispatch.errors`):
a :class:`~realtime_dispatch.errors.TransientError` keeps the row Pending for a retry, a
:class:`~realtime_dispatch.errors.PermanentError` quarantines it. A publisher must not raise for
a single push; raising from :meth:`HubPublisher.publish` marks the whole slice as failed with
that error.

A publisher that pushes one by one honours :data:`PUSH_DEADLINE` (the end of the dispatcher's
pass, in ``time.monotonic()`` seconds): no push starts after it, a push started before it waits
at most for the time left (but :data:`MIN_PUSH_TIME` at least, so that one started just before
the end is not failed for nothing), and a push it never started is answered with
:class:`NotPushed` (the dispatcher gives that row back, due at once, attempt not counted).

Implementations: :class:`~realtime_dispatch.dispatch.http_publisher.HttpHubPublisher` (a hub in
another process), the hub's in-process and Redis backplane publishers, and test recorders.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from realtime_dispatch.errors import RealtimeDispatchError, TransientError

JsonValue: TypeAlias = str | int | float | bool | list["JsonValue"] | dict[str, "JsonValue"] | None
JsonObject: TypeAlias = dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class Push:
    """One hub invocation for one group: ``{"type":1,"target":target,"arguments":[payload]}``."""

    group: str
    target: str
    payload: JsonObject


PublishResult: TypeAlias = RealtimeDispatchError | None

MIN_PUSH_TIME = 0.5  # seconds
PUSH_DEADLINE: ContextVar[float | None] = ContextVar("realtime_push_deadline", default=None)


class NotPushed(TransientError):
    """The pass ran out of time before this push was sent."""

    code = "PassTimeout"


class HubPublisher(Protocol):
    async def publish(self, pushes: Sequence[Push]) -> Sequence[PublishResult]:
        """Deliver ``pushes`` in order; return one result per push, in the same order."""
        ...

    async def aclose(self) -> None:
        """Release connections. Idempotent."""
        ...
