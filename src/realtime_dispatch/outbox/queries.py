"""Named SQL: ``queries.sql`` parsed once into ``QUERIES[name]``. Code refers to queries by
name; parameters are always bound, never formatted in."""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    text = resources.files("realtime_dispatch.outbox").joinpath("queries.sql").read_text("utf-8")
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


QUERIES = MappingProxyType(_load())
