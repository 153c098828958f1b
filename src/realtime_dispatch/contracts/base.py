"""Base of every wire contract: camelCase on the wire, ids as strings, times ISO 8601 UTC."""

from __future__ import annotations

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
