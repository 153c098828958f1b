"""The hub methods a client invokes (:data:`~.session.HUB_METHODS`): each invocation is run
and, when the client waits for it (an invocation id), answered with a completion: void, or
an error whose text says why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from realtime_dispatch.hub.protocol import Invocation
from realtime_dispatch.hub.typing_signal import TypingSignals

if TYPE_CHECKING:
    from realtime_dispatch.hub.connection import HubConnection


class HubMethods:
    __slots__ = ("typing",)

    def __init__(self, typing: TypingSignals) -> None:
        self.typing = typing

    def invoke(self, connection: HubConnection, invocation: Invocation) -> None:
        error: str | None
        if invocation.target == "Typing":
            error = self.typing.typing(connection, invocation.arguments)
        else:  # the session passes on HUB_METHODS only
            error = f"Unknown hub method '{invocation.target[:64]}'."
        invocation_id = invocation.invocation_id
        if invocation_id is None:
            return
        protocol = connection.protocol
        if error is None:
            connection.send(protocol.completion(invocation_id, None))
        else:
            connection.send(protocol.completion_error(invocation_id, error))
