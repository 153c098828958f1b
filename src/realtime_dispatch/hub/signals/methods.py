"""The hub methods a client invokes (:data:`~.session.HUB_METHODS`): each invocation is run
and, when the client waits for it (an invocation id), answered with a completion: void, a
result, or an error whose text says why."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from realtime_dispatch.hub.signals.typing_signal import ANSWERED_LATER, TypingSignals
from realtime_dispatch.hub.wire.invocations import void_completion_json, void_completion_messagepack
from realtime_dispatch.hub.wire.protocol import Invocation
from realtime_dispatch.hub.wire.protocols import JSON, MESSAGEPACK, HubProtocol
from realtime_dispatch.values.json_types import JsonValue

if TYPE_CHECKING:
    from realtime_dispatch.hub.connections.connection import HubConnection
    from realtime_dispatch.hub.signals.presence import Presence


def complete(
    connection: HubConnection, invocation_id: str | None, error: str | None, result: JsonValue
) -> None:
    """Answer an invocation (nothing when the client does not wait for it), straight to the
    transport when it can (:meth:`~.connection.HubConnection.reply`)."""
    if invocation_id is None:
        return
    protocol = connection.protocol
    if error is not None:
        connection.reply(protocol.completion_error(invocation_id, error))
    elif result is None:  # the answer of most invocations (Typing): the record around the id
        connection.reply(_VOID[protocol](invocation_id))
    else:
        connection.reply(protocol.completion(invocation_id, result))


_VOID: dict[HubProtocol, Callable[[str], bytes]] = {
    JSON: void_completion_json,
    MESSAGEPACK: void_completion_messagepack,
}


class HubMethods:
    __slots__ = ("presence", "typing")

    def __init__(self, typing: TypingSignals, presence: Presence | None = None) -> None:
        self.typing = typing
        self.presence = presence

    def invoke(self, connection: HubConnection, invocation: Invocation) -> None:
        target = invocation.target
        presence = self.presence
        if target == "Typing":
            error = self.typing.typing(connection, invocation.arguments, invocation.invocation_id)
            if error is ANSWERED_LATER:
                return  # answered when the block check is done
        elif target == "WatchPresence" and presence is not None:
            presence.watch(connection, invocation)  # answers when the check is done
            return
        elif target == "UnwatchPresence" and presence is not None:
            presence.unwatch(connection, invocation)
            return
        else:  # the session passes on HUB_METHODS only
            error = f"Unknown hub method '{target[:64]}'."
        complete(connection, invocation.invocation_id, error, None)
