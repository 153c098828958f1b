"""realtime-dispatch: persist-then-push delivery of messenger events.

An owner service writes a domain change and, in the same transaction, a push intent into
``messenger.realtime_outbox`` (:func:`enqueue`). The dispatcher worker claims those rows, builds the
typed payload from their reference ids and pushes it to the SignalR-compatible hub.
"""

from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.outbox.enqueue import enqueue, enqueue_select_sql, enqueue_statement
from realtime_dispatch.outbox.model import (
    OutboxIntent,
    OutboxStatus,
    RealtimeDispatchKind,
    RealtimeTargetKind,
    SessionKind,
)

__version__ = "0.1.0"

__all__ = [
    "OutboxIntent",
    "OutboxStatus",
    "RealtimeDispatchError",
    "RealtimeDispatchKind",
    "RealtimeTargetKind",
    "SessionKind",
    "__version__",
    "enqueue",
    "enqueue_select_sql",
    "enqueue_statement",
]
