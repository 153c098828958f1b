"""Typed hub events: the server's own wire contracts (``realtime_dispatch.contracts``), parsed
from an invocation's single argument with the published event → model map.

Fields the SDK does not know (a newer server) are dropped before validation, so an added field
never breaks an older client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from realtime_dispatch.contracts.base import Contract, key_context
from realtime_dispatch.contracts.events import EVENT_MODELS, GROUP_EVENT_MODELS, event_model
from realtime_dispatch.contracts.signals import SIGNAL_MODELS
from realtime_dispatch.keys import UUID_KEYS, KeyCodec
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

__all__ = ["BY_EVENT_NAME", "EVENT_NAME", "parse_event"]
