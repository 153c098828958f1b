"""A projection manifest: one SQL file of named queries (``-- name: <query>`` before each).

``REALTIME_PROJECTIONS`` names the adopter's file; unset, the reference messenger's manifest
shipped in this package (``reference.sql``) is used. Loading checks the file's shape only (names
known, each once); :mod:`.check` prepares the queries against the database.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.manifest.contract import CONTRACT
from realtime_dispatch.outbox.queries import QueryFileError, parse_queries

VARIABLE = "REALTIME_PROJECTIONS"
SHIPPED = "shipped reference manifest"


@dataclass(frozen=True, slots=True)
class Manifest:
    queries: Mapping[str, str] = field(default_factory=dict)
    source: str = SHIPPED
    """The file it was read from (``SHIPPED`` for the package's own)."""

    @property
    def shipped(self) -> bool:
        return self.source == SHIPPED

    def sql(self, name: str) -> str | None:
        """The query named ``name``, or ``None`` when the manifest leaves it out."""
        assert name in CONTRACT, name
        return self.queries.get(name)

    def problem(self, message: str) -> ConfigurationError:
        """The one-line error about this manifest: ``REALTIME_PROJECTIONS: <message> (<file>)``."""
        return ConfigurationError(VARIABLE, f"{message} ({self.source})")


def parse_manifest(text: str, source: str) -> Manifest:
    """A manifest from its text; :class:`ConfigurationError` naming the variable if it does not
    parse or names a query the contract does not have."""
    probe = Manifest(source=source)
    try:
        queries = parse_queries(text)
    except QueryFileError as exc:
        raise probe.problem(str(exc)) from None
    if not queries:
        raise probe.problem("no '-- name: <query>' sections")
    for name, _ in queries:
        if name not in CONTRACT:
            known = ", ".join(CONTRACT)
            raise probe.problem(f"{name}: not a query of the contract (known: {known})")
    return Manifest(MappingProxyType(dict(queries)), source)


@functools.cache
def shipped_manifest() -> Manifest:
    """The reference messenger's projections (what the builders read when nothing is set)."""
    text = resources.files(__package__).joinpath("reference.sql").read_text("utf-8")
    return parse_manifest(text, SHIPPED)


def load_manifest(path: Path | None) -> Manifest:
    """``path``'s manifest, or the shipped one when ``path`` is ``None``."""
    if path is None:
        return shipped_manifest()
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigurationError(VARIABLE, f"cannot read {path}: {reason}") from None
    return parse_manifest(text, str(path))
