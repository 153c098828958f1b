"""Checking a manifest against the database and the contract: each query is prepared (never
run), and its parameters and result columns compared with :data:`.contract.CONTRACT`.

``worker``, ``hub`` and ``serve`` call :func:`require_valid` before their first claim or
connection; ``realtime-dispatch check`` prints :func:`check_manifest`'s lines.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog

from realtime_dispatch.manifest.contract import (
    CONTRACT,
    QueryContract,
    column_types,
    family_name,
    parameter_types,
)
from realtime_dispatch.manifest.kinds import DeclaredKind, column_problem, remember_columns
from realtime_dispatch.manifest.manifest import Manifest
from realtime_dispatch.values.keys import UUID_KEYS, KeyCodec

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class QueryCheck:
    name: str
    ok: bool
    detail: str
    """``ok`` / ``disabled: …`` / ``not set: …``, or the mismatch (``column sent_at missing``)."""

    def line(self) -> str:
        return f"{self.name}: {self.detail}"


def compare(
    contract: QueryContract,
    params: list[str],
    columns: list[tuple[str, str]],
    keys: KeyCodec = UUID_KEYS,
) -> str | None:
    """The first mismatch between a prepared query (its parameter type names, its result
    columns as (name, type name)) and its contract for ``keys`` (REALTIME_KEY_TYPE), or
    ``None``. Pure."""
    expected = parameter_types(contract, keys)
    if params != expected:
        got = ", ".join(params) or "none"
        hint = f" (REALTIME_KEY_TYPE={keys.name})" if keys is not UUID_KEYS else ""
        return f"takes ({got}), expected one parameter $1 {expected[0]}{hint}"
    types = dict(columns)
    names = [name for name, _ in columns]
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        return f"column {twice} returned twice"
    for column in contract.columns:
        got_type = types.get(column.name)
        if got_type is None:
            return f"column {column.name} missing"
        if got_type not in column_types(column.family, keys):
            return (
                f"column {column.name} is {got_type}, expected {family_name(column.family, keys)}"
            )
    return None


async def check_query(
    conn: Any, contract: QueryContract, sql: str, keys: KeyCodec = UUID_KEYS
) -> QueryCheck:
    try:
        stmt = await conn.prepare(sql)
    except asyncpg.PostgresError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return QueryCheck(contract.name, False, f"does not prepare: {reason}")
    params = [t.name for t in stmt.get_parameters()]
    columns = [(a.name, a.type.name) for a in stmt.get_attributes()]
    problem = compare(contract, params, columns, keys)
    if problem is not None:
        return QueryCheck(contract.name, False, problem)
    return QueryCheck(contract.name, True, "ok")


async def check_manifest(
    conn: Any,
    manifest: Manifest,
    *,
    needs: Collection[str] = ("hub",),
    keys: KeyCodec = UUID_KEYS,
) -> list[QueryCheck]:
    """One result per query of the contract (keys of type ``keys``), in contract order. A
    payload query left out is fine (its kinds are disabled), as is the optional one; a query
    whose role is in ``needs`` must be there. A deprecated query has a line only when set."""
    results: list[QueryCheck] = []
    for contract in CONTRACT.values():
        sql = manifest.sql(contract.name)
        if contract.role == "deprecated":
            if sql is not None:
                results.append(await _deprecated(conn, contract, sql, manifest, keys))
            continue
        if sql is None:
            if contract.role in needs:
                needed = f"missing (the {contract.role} needs it)"
                results.append(QueryCheck(contract.name, False, needed))
            elif contract.role == "payload":
                results.append(QueryCheck(contract.name, True, f"disabled: {contract.serves}"))
            else:
                results.append(QueryCheck(contract.name, True, "not set: " + _UNSET[contract.role]))
            continue
        results.append(await check_query(conn, contract, sql, keys))
    for kind in manifest.kinds:
        results.append(await check_kind(conn, kind, keys))
    return results


async def kind_columns(conn: Any, kind: DeclaredKind) -> tuple[list[str], list[tuple[str, str]]]:
    """The parameter types and result columns (name, type) of ``kind``'s query, prepared
    (never run); ``asyncpg.PostgresError`` when it does not prepare."""
    assert kind.sql is not None
    stmt = await conn.prepare(kind.sql)
    params = [t.name for t in stmt.get_parameters()]
    return params, [(a.name, a.type.name) for a in stmt.get_attributes()]


async def check_kind(conn: Any, kind: DeclaredKind, keys: KeyCodec = UUID_KEYS) -> QueryCheck:
    """A declared kind's verdict, named ``kind <Name>``: its query prepares, takes ``$1`` of
    the key type's array, returns ``ref_id`` and only columns a payload can carry."""
    label = f"kind {kind.name}"
    if kind.sql is None:
        return QueryCheck(label, True, f"ok (ids only, event {kind.event} to {kind.target})")
    try:
        params, columns = await kind_columns(conn, kind)
    except asyncpg.PostgresError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return QueryCheck(label, False, f"does not prepare: {reason}")
    problem = compare_kind(kind, params, columns, keys)
    if problem is not None:
        return QueryCheck(label, False, problem)
    remember_columns(kind.sql, columns)
    return QueryCheck(label, True, f"ok (event {kind.event} to {kind.target})")


def compare_kind(
    kind: DeclaredKind, params: list[str], columns: list[tuple[str, str]], keys: KeyCodec
) -> str | None:
    """The first reason ``kind``'s prepared query cannot build its payloads, or ``None``."""
    if params != [keys.array_type]:
        got = ", ".join(params) or "none"
        return f"takes ({got}), expected one parameter $1 {keys.array_type} (the rows' ref_id)"
    names = [name for name, _ in columns]
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        return f"column {twice} returned twice"
    if "ref_id" not in names:
        return "column ref_id missing (it matches each row's ref_id)"
    for name, type_name in columns:
        problem = column_problem(name, type_name, kind, keys)
        if problem is not None:
            return problem
    return None


# A deprecated query → the query that replaces it, and why.
_REPLACED_BY = {
    "chat_alive": (
        "deleted_chats",
        "the chat ids of $1 known to be deleted; with chat_alive a mistyped chat id ends"
        " TargetGone, silently",
    ),
}


async def _deprecated(
    conn: Any, contract: QueryContract, sql: str, manifest: Manifest, keys: KeyCodec
) -> QueryCheck:
    """A deprecated query is still read when its replacement is not set (a manifest written
    for an earlier version keeps working), with a warning; both set is refused."""
    replacement, why = _REPLACED_BY[contract.name]
    if manifest.sql(replacement) is not None:
        return QueryCheck(contract.name, False, f"set beside {replacement}: keep {replacement}")
    checked = await check_query(conn, contract, sql, keys)
    if not checked.ok:
        return checked
    return QueryCheck(contract.name, True, f"deprecated: replace it with {replacement} ({why})")


_UNSET = {
    "optional": "a row whose referenced entity is missing is quarantined",
    "hub": "the hub cannot run without it",
    "sync": "/api/sync is off",
    "presence": "presence shows through every active chat (member_chats)",
}


async def require_valid(
    conn: Any, manifest: Manifest, *, needs: Collection[str], keys: KeyCodec = UUID_KEYS
) -> None:
    """Raise the manifest's one-line :class:`ConfigurationError` on its first failed query; log
    a deprecated query that is set (``manifest_query_deprecated``)."""
    for result in await check_manifest(conn, manifest, needs=needs, keys=keys):
        if not result.ok:
            raise manifest.problem(result.line())
        contract = CONTRACT.get(result.name)
        if contract is not None and contract.role == "deprecated":
            _log.warning("manifest_query_deprecated", line=result.line(), source=manifest.source)
