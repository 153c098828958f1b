"""The own-schema example (`examples/own-schema`) and its named write queries, for the tests
that run it."""

from __future__ import annotations

from pathlib import Path

from realtime_dispatch.outbox.queries import parse_queries

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own-schema"


WRITES = dict(parse_queries((EXAMPLE / "writes.sql").read_text()))
