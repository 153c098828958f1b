"""The Python client SDK: one user's realtime view of the messenger, complete and in order.

::

    from realtime_dispatch_client import MessengerClient, MessageReceived

    async with MessengerClient("http://127.0.0.1:8000", token) as client:
        client.on(MessageReceived, lambda event: print(event.seq, event.body))
        timeline = await client.track(chat_id)      # history now, live after, resync on gaps
        await client.rest.send_message(chat_id, "hello")

On ``hub`` over your own schema (no reference REST API), pass ``resync=`` your own full resync:
the client then resumes through ``GET /api/sync`` alone and never calls ``/api/chats…``.

Modules: ``protocol`` (JSON hub protocol framing, pure), ``timeline`` (dedupe, seq order, gap
detection, pure), ``apply`` (event → timeline, pure), ``events`` (typed payloads), ``rest``
(httpx), ``connection`` (the self-healing WebSocket), ``client`` (all of it together).
"""

from realtime_dispatch.contracts.chats import ChatUpdated, ReadReceiptUpdated
from realtime_dispatch.contracts.messages import MessageDeleted, MessageEdited, MessageReceived
from realtime_dispatch.contracts.signals import PresenceChanged, UserTyping
from realtime_dispatch_client.client import (
    ClientOptions,
    ClientStats,
    KeyType,
    MessengerClient,
    ResyncReason,
)
from realtime_dispatch_client.connection import ConnectionOptions
from realtime_dispatch_client.exceptions import (
    ClientError,
    HubMethodError,
    HubProtocolError,
    HubRefused,
    HubUnavailable,
    RestError,
)
from realtime_dispatch_client.rest import MessengerRest
from realtime_dispatch_client.timeline import Change, Timeline, TimelineMessage

__all__ = [
    "Change",
    "ChatUpdated",
    "ClientError",
    "ClientOptions",
    "ClientStats",
    "ConnectionOptions",
    "HubMethodError",
    "HubProtocolError",
    "HubRefused",
    "HubUnavailable",
    "KeyType",
    "MessageDeleted",
    "MessageEdited",
    "MessageReceived",
    "MessengerClient",
    "MessengerRest",
    "PresenceChanged",
    "ReadReceiptUpdated",
    "RestError",
    "ResyncReason",
    "Timeline",
    "TimelineMessage",
    "UserTyping",
]
