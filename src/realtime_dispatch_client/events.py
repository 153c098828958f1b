"""Typed hub events: the server's own wire contracts (``realtime_dispatch.contracts``), parsed
from an invocation's single argument with the published event → model map.

Fields the SDK does not know (a newer server) are dropped before validation, so an added field
never breaks an older client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from pydantic import ValidationError

from realtime_dispatch.contracts.base import Contract, key_context
from realtime_dispatch.contracts.events import EVENT_MODELS, GROUP_EVENT_MODELS, event_model
from realtime_dispatch.contracts.signals import SIGNAL_MODELS
from realtime_dispatch.values.keys import UUID_KEYS, KeyCodec
from realtime_dispatch_client.exceptions import HubProtocolError

E = TypeVar("E", bound=Contract)

BY_EVENT_NAME: Mapping[str, type[Contract]] = EVENT_MODELS
EVENT_NAME: Mapping[type[Contract], str] = {
    **{m: name for name, m in GROUP_EVENT_MODELS.items()},
    **{m: name for name, m in EVENT_MODELS.items()},
    **{m: name for name, m in SIGNAL_MODELS.items()},
}


def _wire_names(model: type[Contract]) -> frozenset[str]:
    return frozenset(field.alias or name for name, field in model.model_fields.items())


_ALL_MODELS = (*EVENT_MODELS.values(), *GROUP_EVENT_MODELS.values(), *SIGNAL_MODELS.values())
_KNOWN_FIELDS = {model: _wire_names(model) for model in _ALL_MODELS}


@dataclass(frozen=True, slots=True)
class AppEvent:
    """An event of a name this SDK has no model for: an application's own declared kind
    (``reaction_added``), or one of a newer server. ``payload`` is the invocation's argument
    as it came; ``event_id`` its ``eventId`` (the dedupe's key, as for the built-in events),
    ``chat_id`` its ``chatId`` (a chat target's), when they are there."""

    name: str
    payload: dict[str, Any]
    event_id: UUID | None = None
    chat_id: Any = None


def app_event(target: str, arguments: tuple[Any, ...]) -> AppEvent:
    """The :class:`AppEvent` of an invocation whose name has no model; its single argument
    must be an object (:class:`HubProtocolError` otherwise). An ``eventId`` that is not a UUID
    is left out (no dedupe for it, as for a payload without one)."""
    if len(arguments) != 1 or not isinstance(arguments[0], dict):
        raise HubProtocolError(f"{target}: expected one object argument")
    payload = arguments[0]
    raw = payload.get("eventId")
    event_id: UUID | None = None
    if isinstance(raw, str):
        try:
            event_id = UUID(raw)
        except ValueError:
            event_id = None
    return AppEvent(target, payload, event_id, payload.get("chatId"))


def is_known(target: str) -> bool:
    """An event name the SDK has a model for (the 26 and the live signals)."""
    return target in EVENT_MODELS or target in SIGNAL_MODELS


def parse_event(
    target: str, arguments: tuple[Any, ...], *, keys: KeyCodec = UUID_KEYS
) -> Contract | None:
    """The typed event of an invocation (a push, or a live signal such as ``user_typing``);
    ``None`` for an event name this SDK does not know. Its ids are keys of ``keys``' type (the
    deployment's ``REALTIME_KEY_TYPE``): ``UUID``, ``int`` or ``str``; another spelling is a
    :class:`HubProtocolError`."""
    if target not in EVENT_MODELS and target not in SIGNAL_MODELS:
        return None
    if len(arguments) != 1 or not isinstance(arguments[0], dict):
        raise HubProtocolError(f"{target}: expected one object argument")
    model = SIGNAL_MODELS.get(target) or event_model(target, arguments[0])
    if model is None:
        return None
    known = _KNOWN_FIELDS[model]
    payload = {k: v for k, v in arguments[0].items() if k in known}
    try:
        return model.model_validate(payload, context=key_context(keys))
    except ValidationError as exc:
        raise HubProtocolError(f"{target}: payload does not match its contract") from exc


def __getattr__(name: str) -> type[Contract]:
    """Every payload model by its class name (``from realtime_dispatch_client.events import
    CallInvited``), taken from the published map rather than listed again here."""
    model = _BY_CLASS_NAME.get(name)
    if model is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return model


_BY_CLASS_NAME = {m.__name__: m for m in _ALL_MODELS}

__all__ = ["BY_EVENT_NAME", "EVENT_NAME", "AppEvent", "app_event", "is_known", "parse_event"]
