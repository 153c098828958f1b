"""Payload JSON straight from the projection's fields, with orjson.

The pydantic models of :mod:`realtime_dispatch.contracts` stay the schema: what a builder
produces is a model and the fields it would be built from (:data:`Shaped`). On the hot path
:class:`FastEncoder` writes the wire JSON from those fields directly, using only the model's
field list (wire names, which are required): no model instance, no validation pass, no JSON
dump of an intermediate dict. The result is the same JSON as ``model(**fields).wire()`` (absent
optionals omitted, camelCase names, ids as strings, times ISO 8601 with ``Z`` for UTC), which
the tests check for every kind against real rows; :class:`ModelEncoder` is that reference.

``eventId`` is the one field no builder writes: the seam (:mod:`.builder`) puts the outbox row's
id into every payload with :func:`stamp_event_id`, so both encoders leave it out.

The projection's values are typed by PostgreSQL already (uuid, timestamptz, text, bigint), so
the checks the fast encoder keeps are the ones a row could fail: a required field that is null,
or a field the model does not have. Both raise :class:`PayloadBuildError` (``InvalidPayload``),
as a failed validation does on the reference path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias
from uuid import UUID

import orjson
from pydantic import BaseModel, ValidationError

from realtime_dispatch.contracts.base import Contract
from realtime_dispatch.errors import PayloadBuildError

Fields: TypeAlias = Mapping[str, Any]
Shaped: TypeAlias = tuple[type[Contract], Fields]
"""A payload as a builder shapes it: its contract and the fields (Python names) it holds."""

_OPTIONS = orjson.OPT_UTC_Z  # UTC times end in "Z", as pydantic writes them
EVENT_ID = "eventId"
"""The wire field :func:`stamp_event_id` writes, never a builder."""
_NIL = UUID(int=0)


class PayloadEncoder(Protocol):
    def encode(self, model: type[Contract], fields: Fields) -> bytes:
        """The payload's JSON without ``eventId``; :class:`PayloadBuildError` if ``fields`` do
        not fit ``model``."""
        ...


@dataclass(frozen=True, slots=True)
class _Plan:
    aliases: Mapping[str, str]  # Python name → wire name
    required: frozenset[str]  # wire names that must be present (not null)


_PLANS: dict[type[BaseModel], _Plan] = {}


def _plan(model: type[BaseModel]) -> _Plan:
    plan = _PLANS.get(model)
    if plan is None:
        aliases = {name: info.alias or name for name, info in model.model_fields.items()}
        required = frozenset(
            aliases[name] for name, info in model.model_fields.items() if info.is_required()
        ) - {EVENT_ID}
        plan = _PLANS[model] = _Plan(aliases, required)
    return plan


def _invalid(model: type[BaseModel], reason: str) -> PayloadBuildError:
    return PayloadBuildError(
        f"payload failed validation ({model.__name__}: {reason})", code="InvalidPayload"
    )


def _default(value: object) -> object:
    """orjson's hook for what it cannot write itself: asyncpg's own ``UUID`` type (a subclass,
    which orjson does not take for ``uuid.UUID``), and a nested model (the media join and its
    ICE servers), written by its field list like the payload."""
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, BaseModel):
        aliases = _plan(type(value)).aliases
        return {
            alias: item
            for name, alias in aliases.items()
            if (item := getattr(value, name)) is not None
        }
    raise TypeError(type(value).__name__)


class FastEncoder:
    """The hot path: ``{wireName: value}`` of the non-null fields, dumped once by orjson."""

    def encode(self, model: type[Contract], fields: Fields) -> bytes:
        plan = _PLANS.get(model) or _plan(model)
        aliases = plan.aliases
        try:
            out = {aliases[name]: value for name, value in fields.items() if value is not None}
        except KeyError as exc:
            raise _invalid(model, f"unknown field {exc.args[0]}") from None
        if not plan.required <= out.keys():
            missing = ", ".join(sorted(plan.required - out.keys()))
            raise _invalid(model, f"{missing} missing")
        return orjson.dumps(out, default=_default, option=_OPTIONS)


class ModelEncoder:
    """The reference: validate the model, dump its wire object (``Contract.wire()``)."""

    def encode(self, model: type[Contract], fields: Fields) -> bytes:
        try:
            wire = model.model_validate({"event_id": _NIL, **fields}).wire()
        except ValidationError as exc:
            raise _invalid(model, f"{exc.error_count()} errors") from exc
        del wire[EVENT_ID]  # the seam's to write
        return orjson.dumps(wire)


def encoded(
    encoder: PayloadEncoder, model: type[Contract], fields: Fields
) -> bytes | PayloadBuildError:
    """``encoder``'s JSON of the payload, or the permanent error of ``fields`` that do not fit
    ``model`` (``InvalidPayload``)."""
    try:
        return encoder.encode(model, fields)
    except PayloadBuildError as exc:
        return exc
    except ValidationError as exc:
        return PayloadBuildError(
            f"payload failed validation ({exc.error_count()} errors)", code="InvalidPayload"
        )


def stamp_event_id(payload_json: bytes, event_id: UUID) -> bytes:
    """``payload_json`` with ``"eventId"`` (the outbox row id) as its first field: a byte splice
    of an object the encoders wrote (which never contains the field), no second JSON pass."""
    head = b'{"eventId":"' + str(event_id).encode() + b'"'
    return head + (b"}" if payload_json == b"{}" else b"," + payload_json[1:])


FAST = FastEncoder()
