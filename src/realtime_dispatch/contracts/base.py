"""Base of every wire contract: camelCase on the wire, ids as strings, times ISO 8601 UTC."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from realtime_dispatch.push import JsonObject


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
