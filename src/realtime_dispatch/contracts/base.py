"""Base of every wire contract: camelCase on the wire, ids as strings, times ISO 8601 UTC."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def wire(contract: type[Contract], fields: Mapping[str, Any]) -> JsonObject:
    """``contract(**fields).wire()`` in two calls into pydantic-core: the same validation (and
    the same ``ValidationError``) and the same JSON object, without the Python-level model
    ``__init__`` and ``model_dump`` wrappers, which cost more than the work on a hot path."""
    model = contract.__pydantic_validator__.validate_python(fields)
    dumped: JsonObject = contract.__pydantic_serializer__.to_python(
        model, mode="json", by_alias=True, exclude_none=True
    )
    return dumped
