"""The app's own kinds, declared in the manifest beside its named queries: one block per kind.

::

    -- kind: ReactionAdded
    -- target: chat
    -- event: reaction_added
    SELECT r.id AS ref_id, r.message_id, r.user_id, r.emoji, r.created_at
    FROM app.reaction r WHERE r.id = ANY($1);

    -- kind: ReactionRemoved
    -- target: chat
    -- event: reaction_removed
    -- payload: ids

``kind`` is PascalCase (at most 32 characters, not one of the built-in kinds); ``target`` is
``chat`` (the row's ``chat_id``, group ``chat:{chatId}``) or ``user`` (the row's
``target_user_id``); ``event`` is the hub event name in snake_case. A kind either has a query
(``$1`` = the batch's ``ref_id`` values; it returns ``ref_id`` and the payload's columns) or is
``-- payload: ids`` (the row's own ids, no query). ``-- deleted_chats: deliver`` lets a kind
that announces a chat's end reach the members although ``deleted_chats`` reports the chat
deleted (see :class:`DeclaredKind`).

Parsing here is pure (names, directives, each kind once); :mod:`.check` prepares the queries
against the database (:func:`column_problem` is the per-column rule it applies).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from realtime_dispatch.outbox.model import RealtimeDispatchKind, RealtimeTargetKind
from realtime_dispatch.values.keys import KeyCodec

KIND_NAME = re.compile(r"[A-Z][A-Za-z0-9]*")
EVENT_NAME = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
MAX_KIND = 32  # the outbox's kind column is varchar(32)
MAX_EVENT = 64
TARGETS = {"chat": RealtimeTargetKind.CHAT_GROUP, "user": RealtimeTargetKind.USER}
DIRECTIVES = ("target", "event", "payload", "deleted_chats")
BUILTIN_KINDS = frozenset(kind.value for kind in RealtimeDispatchKind)
BUILTIN_EVENTS = frozenset(kind.event_name for kind in RealtimeDispatchKind) | {
    "user_typing",
    "presence_changed",
}
"""Event names a declared kind may not take: the built-in kinds' and the hub's own."""

ID_FIELDS = (
    ("chat_id", "chatId"),
    ("ref_id", "refId"),
    ("message_id", "messageId"),
    ("seq", "seq"),
    ("target_user_id", "targetUserId"),
)
"""An ids-only payload's fields: the row's own ids, those that are set."""

_DIRECTIVE = re.compile(r"^--\s*([a-z_]+)\s*:(.*)$")


class KindError(ValueError):
    """A declared kind that cannot be: the message starts ``kind <Name>:`` (no SQL in it)."""


@dataclass(frozen=True, slots=True)
class DeclaredKind:
    name: str
    target: str
    """``chat`` or ``user``."""
    event: str
    sql: str | None
    """The payload query, or ``None`` for ``-- payload: ids``."""
    deliver_when_chat_deleted: bool = False
    """``-- deleted_chats: deliver``: a ``ref_id`` the query does not return, in a chat the
    manifest's ``deleted_chats`` reports deleted, is delivered with the row's ids (not Done
    ``TargetGone``): for a kind that announces the chat's end. Ids-only kinds never miss."""

    @property
    def target_kind(self) -> RealtimeTargetKind:
        return TARGETS[self.target]

    @property
    def ids_only(self) -> bool:
        return self.sql is None


def camel(column: str) -> str:
    """A column's payload field: ``message_id`` → ``messageId``."""
    head, *rest = column.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def parse_kind(header: str, body: str) -> DeclaredKind:
    """One ``-- kind: <header>`` block (``body``: the lines under it); :class:`KindError`."""
    name = header.strip()
    if not KIND_NAME.fullmatch(name) or len(name) > MAX_KIND:
        raise KindError(
            f"kind {name or '(empty)'}: not a kind name (PascalCase, letters and digits,"
            f" at most {MAX_KIND} characters)"
        )
    if name in BUILTIN_KINDS:
        raise KindError(f"kind {name}: a built-in kind (declare only the app's own)")
    found: dict[str, str] = {}
    sql_lines: list[str] = []
    for line in body.strip().splitlines():
        stripped = line.strip()
        match = _DIRECTIVE.match(stripped)
        if match and not sql_lines:
            directive, value = match[1], match[2].strip()
            if directive not in DIRECTIVES:
                known = ", ".join(DIRECTIVES)
                raise KindError(f"kind {name}: unknown directive '-- {directive}:' ({known})")
            if directive in found:
                raise KindError(f"kind {name}: '-- {directive}:' given twice")
            found[directive] = value
        elif stripped.startswith("--") or not stripped:
            continue
        else:
            sql_lines.append(line)
    target = found.get("target")
    if target is None or target not in TARGETS:
        raise KindError(f"kind {name}: target must be chat or user (got {target or 'none'})")
    event = found.get("event")
    if event is None or not EVENT_NAME.fullmatch(event) or len(event) > MAX_EVENT:
        raise KindError(
            f"kind {name}: event must be a snake_case name of at most {MAX_EVENT} characters"
            f" (got {event or 'none'})"
        )
    if event in BUILTIN_EVENTS:
        raise KindError(f"kind {name}: event {event} is a built-in event")
    payload = found.get("payload")
    if payload not in (None, "ids"):
        raise KindError(f"kind {name}: payload must be ids (got {payload})")
    deleted = found.get("deleted_chats")
    if deleted not in (None, "deliver"):
        raise KindError(f"kind {name}: deleted_chats must be deliver (got {deleted})")
    sql = "\n".join(sql_lines).strip().rstrip(";").strip() or None
    if payload == "ids" and sql is not None:
        raise KindError(f"kind {name}: payload: ids takes no query")
    if payload is None and sql is None:
        raise KindError(f"kind {name}: no query (write one, or '-- payload: ids')")
    return DeclaredKind(name, target, event, sql, deliver_when_chat_deleted=deleted is not None)


def check_unique(kinds: Iterable[DeclaredKind]) -> None:
    """Each kind and each event once across the manifest; :class:`KindError`."""
    names: set[str] = set()
    events: dict[str, str] = {}
    for kind in kinds:
        if kind.name in names:
            raise KindError(f"kind {kind.name}: declared twice")
        names.add(kind.name)
        other = events.get(kind.event)
        if other is not None:
            raise KindError(f"kind {kind.name}: event {kind.event} is also {other}'s")
        events[kind.event] = kind.name


# Column types (asyncpg's names) that have a JSON form, and how the payload writes them.
JSON_TYPES: dict[str, str] = {
    "uuid": "string",
    "text": "string",
    "varchar": "string",
    "bpchar": "string",
    "name": "string",
    "citext": "string",
    "int2": "number",
    "int4": "number",
    "int8": "number",
    "float4": "number",
    "float8": "number",
    "numeric": "string",
    "bool": "boolean",
    "timestamptz": "string",
    "date": "string",
    "json": "unknown",
    "jsonb": "unknown",
}
"""PostgreSQL type → its TypeScript type in a payload (``numeric`` goes out as a string, keeping
its digits; ``timestamptz`` as ISO 8601 UTC; ``date`` as ``YYYY-MM-DD``; ``json``/``jsonb`` as
the JSON itself). Arrays of these go out as JSON arrays."""
_NO_JSON_HINT = {
    "timestamp": "timestamp without time zone: use timestamptz",
    "bytea": "bytea: encode it (encode(col, 'base64'))",
}


def column_problem(column: str, type_name: str, kind: DeclaredKind, keys: KeyCodec) -> str | None:
    """Why a query's column cannot be a payload field of ``kind``, or ``None``."""
    if column == "event_id":
        return "column event_id: eventId is the outbox row's id"
    if column in ("ref_id", "chat_id", "target_user_id") and type_name not in keys.column_types:
        role = {"ref_id": "matched to the row's ref_id"}.get(column, "compared with the row's")
        return f"column {column} is {type_name}, expected {keys.name} ({role})"
    element = type_name[1:] if type_name.startswith("_") else type_name
    if element not in JSON_TYPES:
        hint = _NO_JSON_HINT.get(element, f"{type_name} has no JSON form")
        return f"column {column} cannot be sent: {hint}"
    if camel(column) != column and column.lower() != column:
        return f"column {column}: name it in snake_case (the field is its camelCase)"
    return None


_JSON_COLUMNS: dict[str, frozenset[str]] = {}


def remember_columns(sql: str, columns: Sequence[tuple[str, str]]) -> None:
    """Note which columns of a declared kind's query are ``json``/``jsonb`` (its check, at
    start, prepared it on a session connection): the builder then sends them as JSON without
    preparing the query itself on a pooled connection (a named statement there would outlive
    its transaction behind PgBouncer)."""
    _JSON_COLUMNS[sql] = frozenset(name for name, type_name in columns if type_name in JSON_ONLY)


def json_columns(sql: str) -> frozenset[str] | None:
    """The ``json``/``jsonb`` columns of a query :func:`remember_columns` saw, else None."""
    return _JSON_COLUMNS.get(sql)


JSON_ONLY = frozenset({"json", "jsonb"})


def typescript_type(type_name: str) -> str:
    """A column type's TypeScript type in a payload."""
    if type_name.startswith("_"):
        return f"{typescript_type(type_name[1:])}[]"
    return JSON_TYPES.get(type_name, "unknown")


def typescript_module(
    kinds: Iterable[DeclaredKind],
    columns: Mapping[str, Sequence[tuple[str, str]]],
    keys: KeyCodec,
    *,
    source: str,
) -> str:
    """A TypeScript module typing the declared kinds' payloads: one interface per kind
    (``<Kind>Payload``) and ``DeclaredEvents`` (event name → payload), for
    ``client.on(name, handler)``. ``columns``: each query kind's result columns (name, type).
    A query column may be null (nothing in a prepared statement says it cannot be), except
    ``ref_id``, which matched the row."""
    key = "number" if keys.name == "bigint" else "string"
    lines = [
        "// Generated by `realtime-dispatch kinds --typescript` from the projection manifest",
        f"// ({source}). Do not edit: run the command again when a kind changes.",
        "",
    ]
    events: list[tuple[str, str]] = []
    for kind in kinds:
        name = f"{kind.name}Payload"
        events.append((kind.event, name))
        fields: list[tuple[str, str, bool]] = [("eventId", "string", False)]
        if kind.target == "chat":
            fields.append(("chatId", key, False))
        if kind.ids_only:
            for column, field in ID_FIELDS:
                if field == "chatId" and kind.target == "chat":
                    continue
                if field == "targetUserId" and kind.target == "user":
                    fields.append((field, key, False))
                    continue
                fields.append((field, "number" if column == "seq" else key, True))
        else:
            for column, type_name in columns.get(kind.name, ()):
                if column == "chat_id" and kind.target == "chat":
                    continue
                if column in ("ref_id", "chat_id", "target_user_id"):
                    ts = key
                else:
                    ts = typescript_type(type_name)
                nullable = column != "ref_id"
                fields.append((camel(column), f"{ts} | null" if nullable else ts, False))
        lines.append(f"/** {kind.name}: event `{kind.event}` to the {kind.target}. */")
        lines.append(f"export interface {name} {{")
        lines.extend(f"  {field}{'?' if optional else ''}: {ts};" for field, ts, optional in fields)
        lines.append("}")
        lines.append("")
    lines.append("/** Declared event name → its payload. */")
    lines.append("export interface DeclaredEvents {")
    lines.extend(f"  {event}: {name};" for event, name in events)
    lines.append("}")
    lines.append("")
    lines.append("export type DeclaredEventName = keyof DeclaredEvents;")
    return "\n".join(lines) + "\n"
