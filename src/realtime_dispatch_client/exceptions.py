"""What the client SDK raises, under the package's one root::

    RealtimeDispatchError
    └── ClientError                  anything the SDK raises on purpose
        ├── HubRefused               the hub answered 401/403: the token is bad; no retry
        ├── HubProtocolError         the hub sent something the JSON hub protocol does not allow
        ├── HubMethodError           a hub method (``typing``, ``watch_presence``) answered an error
        ├── HubUnavailable           a hub method was called while not connected, or got no answer
        └── RestError                the REST API answered an error (``status``, ``error`` code);
                                     also a ``realtime_dispatch.errors.Refusal``, the shape the
                                     server refuses with

Transport failures (connection refused, dropped sockets) are not raised: the client reconnects
and resyncs by itself.
"""

from __future__ import annotations

from realtime_dispatch.errors import RealtimeDispatchError, Refusal


class ClientError(RealtimeDispatchError, code="ClientError"): ...


class HubRefused(ClientError, code="HubRefused"): ...


class HubProtocolError(ClientError, code="HubProtocol"): ...


class HubMethodError(ClientError, code="HubMethodError"): ...


class HubUnavailable(ClientError, code="HubUnavailable"): ...


class RestError(ClientError, Refusal, code="RestError"):
    """The server's :class:`~realtime_dispatch.errors.Refusal` as the client got it:
    ``status``, ``error`` (the body's code, also ``code``), ``message`` (the body's), and
    ``retry_after`` (seconds, when the server said when to come back)."""

    def __init__(
        self, status: int, error: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(
            f"{status} {error}: {message}",
            code=error or "RestError",
            status=status,
            retry_after=retry_after,
        )
        self.error = error
        self.message = message
