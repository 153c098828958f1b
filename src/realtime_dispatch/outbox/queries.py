"""Named SQL: ``queries.sql`` parsed once into ``QUERIES[name]``. Code refers to queries by
name; parameters are always bound, never formatted in."""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str = "queries.sql") -> MappingProxyType[str, str]:
    """Parse ``-- name: …`` sections of a packaged SQL file (comment lines dropped)."""
    text = resources.files(package).joinpath(filename).read_text("utf-8")
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return MappingProxyType(queries)


QUERIES = load_queries("realtime_dispatch.outbox")
