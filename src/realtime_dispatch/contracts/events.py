"""The published map from hub event name to its payload model: what a client parses an
invocation with, and what the dispatcher's projections must produce.

Event names are the outbox kinds in snake_case (``MessageReceived`` → ``message_received``),
each with the model its row of :mod:`realtime_dispatch.values.catalogue` names.
``call_invited`` and ``call_ended`` have a second, group shape (a conference call pushed to
``chat:{chatId}``), told apart by its ``conferenceId`` field.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module

from realtime_dispatch.contracts import calls
from realtime_dispatch.contracts.base import Contract
from realtime_dispatch.values.catalogue import CATALOGUE


def _contract(path: str) -> type[Contract]:
    """``recordings.RecordingStarted`` → that model of :mod:`realtime_dispatch.contracts`."""
    module, name = path.rsplit(".", 1)
    model = getattr(import_module(f"{__package__}.{module}"), name, None)
    if not (isinstance(model, type) and issubclass(model, Contract)):
        raise TypeError(f"the catalogue's contract {path} is not a model of {__package__}")
    return model


EVENT_MODELS: Mapping[str, type[Contract]] = {
    entry.event: _contract(entry.contract) for entry in CATALOGUE
}
"""Event name → the payload model of its 1:1 (or only) shape, from the kinds' catalogue (the
row's event and contract), in its order."""

GROUP_EVENT_MODELS: Mapping[str, type[Contract]] = {
    "call_invited": calls.GroupCallInvited,
    "call_ended": calls.GroupCallEnded,
}
"""Event name → the payload model of its group shape (``session_kind = Conference``)."""

GROUP_SHAPE_FIELD = "conferenceId"
"""The wire field present only in a group shape."""


def event_model(event: str, payload: Mapping[str, object]) -> type[Contract] | None:
    """The model an invocation's payload is parsed with; ``None`` for an unknown event."""
    group = GROUP_EVENT_MODELS.get(event)
    if group is not None and GROUP_SHAPE_FIELD in payload:
        return group
    return EVENT_MODELS.get(event)
