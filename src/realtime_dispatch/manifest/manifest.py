"""A projection manifest: one SQL file of named queries (``-- name: <query>`` before each).

``REALTIME_PROJECTIONS`` names the adopter's file; unset, the reference messenger's manifest
shipped in this package (``reference.sql``) is used. Loading checks the file's shape only (names
known, each once); :mod:`.check` prepares the queries against the database.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.manifest.contract import CONTRACT
from realtime_dispatch.manifest.kinds import DeclaredKind, KindError, check_unique, parse_kind
from realtime_dispatch.outbox.queries import QueryFileError, parse_queries

VARIABLE = "REALTIME_PROJECTIONS"
SHIPPED = "shipped reference manifest"


@dataclass(frozen=True, slots=True)
class Manifest:
    queries: Mapping[str, str] = field(default_factory=dict)
    source: str = SHIPPED
    """The file it was read from (``SHIPPED`` for the package's own)."""
    kinds: tuple[DeclaredKind, ...] = ()
    """The app's own kinds (``-- kind:`` blocks), in file order."""

    @property
    def shipped(self) -> bool:
        return self.source == SHIPPED

    def sql(self, name: str) -> str | None:
        """The query named ``name``, or ``None`` when the manifest leaves it out."""
        assert name in CONTRACT, name
        return self.queries.get(name)

    def kind(self, name: str) -> DeclaredKind | None:
        """The declared kind ``name``, or ``None``."""
        return next((kind for kind in self.kinds if kind.name == name), None)

    def problem(self, message: str) -> ConfigurationError:
        """The one-line error about this manifest: ``REALTIME_PROJECTIONS: <message> (<file>)``."""
        return ConfigurationError(VARIABLE, f"{message} ({self.source})")


_BLOCK = re.compile(r"^-- (name|kind):(.*)$", re.MULTILINE)


def _split(text: str) -> tuple[str, list[tuple[str, str]]]:
    """``text`` as (its named queries' text, for :func:`parse_queries`; the ``-- kind:``
    blocks as (header, body))."""
    parts = _BLOCK.split(text)
    named = [parts[0]]
    kinds: list[tuple[str, str]] = []
    for what, header, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if what == "name":
            named.append(f"-- name:{header}{body}")
        else:
            kinds.append((header, body))
    return "".join(named), kinds


def parse_manifest(text: str, source: str) -> Manifest:
    """A manifest from its text; :class:`ConfigurationError` naming the variable if it does not
    parse, names a query the contract does not have, or declares a kind that cannot be (the
    line names the kind and the reason)."""
    probe = Manifest(source=source)
    named, blocks = _split(text)
    try:
        queries = parse_queries(named)
        kinds = tuple(parse_kind(header, body) for header, body in blocks)
        check_unique(kinds)
    except (QueryFileError, KindError) as exc:
        raise probe.problem(str(exc)) from None
    if not queries:
        raise probe.problem("no '-- name: <query>' sections")
    for name, _ in queries:
        if name not in CONTRACT:
            known = ", ".join(CONTRACT)
            raise probe.problem(f"{name}: not a query of the contract (known: {known})")
    return Manifest(MappingProxyType(dict(queries)), source, kinds)


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
