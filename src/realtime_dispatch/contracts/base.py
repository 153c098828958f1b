"""Base of every wire contract: camelCase on the wire, times ISO 8601 UTC, the owner's keys as
:data:`KeyId` (a UUID string, a JSON number for bigint keys, a string for text keys).

A payload's ids are the deployment's keys (``REALTIME_KEY_TYPE``). Parsing one takes the key
type from the validation context, ``model.model_validate(data, context=key_context(codec))``;
without a context the keys are UUIDs, the reference messenger's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationInfo, WithJsonSchema
from pydantic.alias_generators import to_camel

from realtime_dispatch.values.json_types import JsonObject
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

_CONTEXT_KEY = "realtime_keys"


def key_context(keys: KeyCodec) -> dict[str, KeyCodec]:
    """The validation context that makes :data:`KeyId` fields read keys of ``keys``' type."""
    return {_CONTEXT_KEY: keys}


def _key(value: object, info: ValidationInfo) -> Key:
    context = info.context
    keys = context.get(_CONTEXT_KEY, UUID_KEYS) if isinstance(context, Mapping) else UUID_KEYS
    if isinstance(value, UUID) and keys is UUID_KEYS:
        return value  # built in Python (asyncpg's own UUID subclass included)
    try:
        return keys.from_json(value)
    except ValueError as exc:
        raise ValueError(f"not a {keys.name} key: {exc}") from None


KEY_JSON_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "string"}, {"type": "integer"}],
    "description": "A key of the deployment's type (REALTIME_KEY_TYPE): a UUID string (uuid,"
    " the default), a JSON number (bigint), a string (text).",
}

KeyId = Annotated[Key, PlainValidator(_key), WithJsonSchema(KEY_JSON_SCHEMA)]
"""An id of the owner's (a chat, a message, a user, …): ``UUID``, ``int`` or ``str`` as the
deployment's key type says; written to JSON as a string, or a number for ``int``."""


class Contract(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )

    def wire(self) -> JsonObject:
        """The JSON object sent as the invocation's single argument (absent optionals omitted)."""
        dumped: JsonObject = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped


def _event_id_always_sent(schema: dict[str, Any]) -> None:
    """In the published schema (and so the TypeScript types) ``eventId`` is a required string:
    what every push and sync event carries."""
    properties = schema.setdefault("properties", {})
    properties["eventId"] = {"type": "string", "format": "uuid"}
    schema["required"] = ["eventId", *(f for f in schema.get("required", []) if f != "eventId")]


class PushPayload(Contract):
    """Base of every hub event payload.

    ``eventId`` is the outbox row the push was built from: the dispatcher and ``GET /api/sync``
    always send it, a repeated push of one row carries the same id, and a client dedupes by
    it. It is optional in the model only so that a payload from another publisher (the push
    API) or an older server still parses."""

    model_config = ConfigDict(json_schema_extra=_event_id_always_sent)

    event_id: UUID | None = None


class SessionPayload(PushPayload):
    """Base of the payloads that follow a media session (recordings, screen shares): a call
    (``session_kind`` ``Direct``, ``call_id``) or a conference (``Conference``,
    ``conference_id`` and its ``chat_id``)."""

    session_kind: str
    call_id: KeyId | None = None
    conference_id: KeyId | None = None
    chat_id: KeyId | None = None


class ApiModel(BaseModel):
    """Base of the REST bodies: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")
