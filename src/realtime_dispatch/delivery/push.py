"""What a push is, and the seam between the dispatcher and the hub: :class:`HubPublisher`.

The JSON aliases and :class:`Push` live here, below both, so that neither imports the other.

The dispatcher never imports hub internals. It hands a publisher a slice of :class:`Push` values
(already in outbox order) and gets back one result per push: ``None`` for delivered/enqueued, or
the error for that push. Errors are classified by type (see :mod:`realtime_dispatch.errors`):
a :class:`~realtime_dispatch.errors.TransientError` keeps the row Pending for a retry, a
:class:`~realtime_dispatch.errors.PermanentError` quarantines it. A publisher must not raise for
a single push; raising from :meth:`HubPublisher.publish` marks the whole slice as failed with
that error.

A publisher honours the ``deadline`` it is given (the end of the dispatcher's pass, in
``time.monotonic()`` seconds; None: none): no push starts after it, a push started before it
waits at most for the time left (but :data:`MIN_PUSH_TIME` at least, so that one started just
before the end is not failed for nothing), and a push it never started is answered with
:class:`NotPushed` (the dispatcher gives that row back, due at once, attempt not counted).

Implementations: :class:`~realtime_dispatch.dispatch.http_publisher.HttpHubPublisher` (a hub in
another process), the hub's in-process and Redis backplane publishers, and test recorders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias

import orjson

from realtime_dispatch.errors import RealtimeDispatchError, TransientError
from realtime_dispatch.values.json_types import JsonObject


class Push:
    """One hub invocation for one group: ``{"type":1,"target":target,"arguments":[payload]}``.

    Built from the payload object (``Push(group, target, payload)``) or from its JSON already
    encoded (``Push(group, target, payload_json=b"{...}")``, what the dispatcher's projections
    produce): a publisher that writes JSON takes :attr:`payload_json` as is; :attr:`payload`
    decodes it on first use. Either one is worked out at most once. Immutable."""

    __slots__ = ("_payload", "_payload_json", "group", "target")

    group: str
    target: str
    _payload: JsonObject | None
    _payload_json: bytes | None

    def __init__(
        self,
        group: str,
        target: str,
        payload: JsonObject | None = None,
        *,
        payload_json: bytes | None = None,
    ) -> None:
        if payload is None and payload_json is None:
            raise TypeError("Push needs payload or payload_json")
        _set_group(self, group)
        _set_target(self, target)
        _set_payload(self, payload)
        _set_payload_json(self, payload_json)

    @property
    def payload(self) -> JsonObject:
        """The payload object (decoded from :attr:`payload_json` on first use)."""
        payload = self._payload
        if payload is None:
            payload = orjson.loads(self._payload_json or b"{}")
            _set_payload(self, payload)
        return payload

    @property
    def payload_json(self) -> bytes:
        """The payload as UTF-8 JSON bytes (encoded from :attr:`payload` on first use)."""
        encoded = self._payload_json
        if encoded is None:
            encoded = orjson.dumps(self._payload)
            _set_payload_json(self, encoded)
        return encoded

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Push is immutable: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Push is immutable: cannot delete {name}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Push):
            return NotImplemented
        return (self.group, self.target, self.payload) == (other.group, other.target, other.payload)

    __hash__ = None  # type: ignore[assignment]  # the payload is a dict

    def __repr__(self) -> str:
        return f"Push(group={self.group!r}, target={self.target!r}, payload={self.payload!r})"


# Push's slots set through their descriptors, past its __setattr__ (a third cheaper than
# object.__setattr__, which looks each name up first): a push is built per outbox row.
_set_group = vars(Push)["group"].__set__
_set_target = vars(Push)["target"].__set__
_set_payload = vars(Push)["_payload"].__set__
_set_payload_json = vars(Push)["_payload_json"].__set__

PublishResult: TypeAlias = RealtimeDispatchError | None

# The HTTP push API, shared by the worker's publisher and the hub's endpoint: the one-push form
# (Azure SignalR's REST shape) and the batch form, ``{"pushes": [{"group", "target",
# "arguments"}, ...]}`` answered with one status per push.
PUSH_PATH = "/api/v1/hubs/messenger/groups/{group}"
BATCH_PATH = "/api/v1/hubs/messenger/batch"
MAX_PUSH_BYTES = 256 * 1024
"""The largest body of a one-push request, and the largest invocation record in a batch."""
MAX_BATCH_PUSHES = 1000
MAX_BATCH_BYTES = 4 * 1024 * 1024

MIN_PUSH_TIME = 0.5  # seconds


class NotPushed(TransientError):
    """The pass ran out of time before this push was sent."""

    code = "PassTimeout"


class HubPublisher(Protocol):
    async def publish(
        self,
        pushes: Sequence[Push],
        *,
        deadline: float | None = None,
        marks: Sequence[str] = (),
    ) -> Sequence[PublishResult]:
        """Deliver ``pushes`` in order; return one result per push, in the same order.

        ``deadline``: the end of the dispatcher's pass (``time.monotonic()`` seconds), see the
        module's docstring; None outside a pass. ``marks``: the membership marks the pushes'
        claim can vouch for (:mod:`realtime_dispatch.delivery.marks`), read when the slice is
        published; a publisher that hands marks on (the hub's in-process and Redis publishers,
        the HTTP publisher's batch body) carries them, any other ignores them."""
        ...

    async def aclose(self) -> None:
        """Release connections. Idempotent."""
        ...


# The push endpoint's own refusals carry this marker, so that the worker tells "the hub says this
# push is invalid" (permanent) from what a proxy, an ingress or a wrong URL answers (transient).
HUB_PROBLEM_SOURCE = "realtime-dispatch-hub"


def hub_problem(detail: str, code: str) -> JsonObject:
    """The body of a refusal by the push endpoint: ``{"error", "code", "source"}``."""
    return {"error": detail, "code": code, "source": HUB_PROBLEM_SOURCE}


def hub_problem_code(body: bytes) -> str | None:
    """The ``code`` of a body written by :func:`hub_problem`; None for any other body."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or value.get("source") != HUB_PROBLEM_SOURCE:
        return None
    code = value.get("code")
    return code if isinstance(code, str) and code else None
