"""Named SQL: ``queries.sql`` parsed once into ``QUERIES[name]``. Code refers to queries by
name; parameters are always bound, never formatted in.

:func:`parse_queries` is the format's one parser: the packaged query files and an adopter's
projection manifest (``REALTIME_PROJECTIONS``) are read by it alike."""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType

_HEADER = re.compile(r"^-- name:(.*)$", re.MULTILINE)
_NAME = re.compile(r"^\w+$")


class QueryFileError(ValueError):
    """A query file that does not parse: the message says where (no SQL text in it)."""


def parse_queries(text: str) -> list[tuple[str, str]]:
    """The ``-- name: …`` sections of ``text`` in file order, each query without its comment
    lines and trailing semicolon. Only comments and blank lines may precede the first header;
    a name is a word; a name appears once; a query is not empty."""
    parts = _HEADER.split(text)
    if any(_sql_lines(parts[0])):
        raise QueryFileError("SQL before the first '-- name:' line")
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for header, body in zip(parts[1::2], parts[2::2], strict=True):
        name = header.strip()
        if not _NAME.match(name):
            raise QueryFileError(f"'-- name: {name}' is not a query name (letters, digits, _)")
        if name in seen:
            raise QueryFileError(f"{name}: named twice")
        seen.add(name)
        sql = "\n".join(_sql_lines(body)).strip().rstrip(";").strip()
        if not sql:
            raise QueryFileError(f"{name}: no SQL under its name")
        found.append((name, sql))
    return found


def _sql_lines(body: str) -> list[str]:
    return [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]


def load_queries(package: str, filename: str = "queries.sql") -> MappingProxyType[str, str]:
    """Parse ``-- name: …`` sections of a packaged SQL file (comment lines dropped)."""
    text = resources.files(package).joinpath(filename).read_text("utf-8")
    return MappingProxyType(dict(parse_queries(text)))


QUERIES = load_queries("realtime_dispatch.outbox")
