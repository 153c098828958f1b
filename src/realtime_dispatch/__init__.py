"""realtime-dispatch: persist-then-push delivery of messenger events.

An owner service writes a domain change and, in the same transaction, a push intent into
``messenger.realtime_outbox`` (:func:`enqueue`). The dispatcher worker claims those rows, builds the
typed payload from their reference ids and pushes it to the SignalR-compatible hub.

Two things ship in this package: the pipeline (``outbox``, ``dispatch``, ``hub``, ``sync``,
``ops``, ``manifest``, ``auth``, ``contracts``, ``delivery`` and the ground floor below them) and
the reference messenger app written against it (``messenger``: its domain, REST API, jobs,
tables and demo page; its REST bodies are ``contracts.messenger_rest``). No pipeline package
imports the app; ``cli`` and ``settings`` wire the two together (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Loaded on first use, so that importing a subpackage (the client SDK above all) does not load
# the outbox along with this package.
_LAZY = {
    "RealtimeDispatchError": "realtime_dispatch.errors",
    "enqueue": "realtime_dispatch.outbox.enqueue",
    "enqueue_select_sql": "realtime_dispatch.outbox.enqueue",
    "enqueue_statement": "realtime_dispatch.outbox.enqueue",
    "OutboxIntent": "realtime_dispatch.outbox.model",
    "OutboxStatus": "realtime_dispatch.outbox.model",
    "RealtimeDispatchKind": "realtime_dispatch.outbox.model",
    "RealtimeTargetKind": "realtime_dispatch.outbox.model",
    "SessionKind": "realtime_dispatch.outbox.model",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'realtime_dispatch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
