"""The manifest's contract: every query name the package reads, what it serves, its parameter,
and the columns (name, type family, meaning) the shipped builders read from its rows.

Pure data. docs/reference.md ("Projection manifest") is this table written out; a test keeps
the two in step. Extra columns are allowed (and ignored); a missing column or one of another
type family is a mismatch.

The ``uuid`` family is the owner's key (``REALTIME_KEY_TYPE``): the reference messenger's
keys are uuid, an owner's may be bigint or text. :func:`parameter_types` and
:func:`column_types` resolve the contract for one key type; nothing else here depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from realtime_dispatch.values.catalogue import CATALOGUE
from realtime_dispatch.values.keys import KeyCodec

# A type family: the PostgreSQL types a column may have (asyncpg's type names).
TYPE_FAMILIES: MappingProxyType[str, frozenset[str]] = MappingProxyType(
    {
        "uuid": frozenset({"uuid"}),
        "text": frozenset({"text", "varchar", "bpchar", "name"}),
        "integer": frozenset({"int2", "int4", "int8"}),
        "timestamptz": frozenset({"timestamptz"}),
        "json": frozenset({"json", "jsonb", "text", "varchar"}),
    }
)
KEY_FAMILY = "uuid"
"""The family of the owner's keys: the types of ``REALTIME_KEY_TYPE`` (uuid by default)."""


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    family: str
    meaning: str


@dataclass(frozen=True, slots=True)
class QueryContract:
    name: str
    serves: str
    """The kinds (or the component) the query serves, as the docs say it."""
    param: str
    """What ``$1 uuid[]`` holds: the outbox column whose values of the batch are passed."""
    columns: tuple[Column, ...]
    role: str = "payload"
    """``payload`` (absent: its kinds are disabled), ``hub`` (required by the hub),
    ``optional``, ``sync`` (absent: ``GET /api/sync`` is off on that schema), ``presence``
    (absent: presence follows ``member_chats``) or ``deprecated`` (still read, ``check``
    warns)."""
    takes: str = "keys"
    """Its ``$1``: ``keys`` (an array of keys, the batch's) or ``key`` (one key)."""
    entity: str = ""
    """A payload query: what its ``id`` column is (``Recording``): the not-found code
    (``RecordingNotFound``) and, in a payload read from the columns as they are, the field that
    carries the id (``recording_id``)."""
    audience: str = ""
    """A payload query of ``user`` kinds read from the columns as they are: the column naming
    the one user allowed to see the entity (the row's ``target_user_id`` must be it)."""

    @property
    def column_names(self) -> frozenset[str]:
        return frozenset(column.name for column in self.columns)


def _payload(spec: str, *, note: str = "") -> QueryContract:
    """A payload query from ``spec``: a first line ``name param Entity [audience=column]``, then
    its columns as :func:`_cols` reads them. What it serves is the kinds whose catalogue rows
    name it (with ``note``, for what serves it beyond them)."""
    head, columns = spec.strip().split("\n", 1)
    name, param, entity, *rest = head.split()
    options = dict(word.split("=", 1) for word in rest)
    kinds = ", ".join(entry.kind for entry in CATALOGUE if entry.query == name)
    return QueryContract(
        name,
        kinds + note,
        param,
        _cols(columns),
        entity=entity,
        audience=options.get("audience", ""),
    )


def parameter_types(contract: QueryContract, keys: KeyCodec) -> list[str]:
    """The parameter types (asyncpg's names) ``contract``'s query must take with ``keys``:
    ``[uuid[]]``, ``[int8[]]``, ``[text[]]``, or the key's own type for a one-key query."""
    return [keys.array_type if contract.takes == "keys" else keys.param_type]


def column_types(family: str, keys: KeyCodec) -> frozenset[str]:
    """The column types (asyncpg's names) of ``family`` with ``keys``."""
    return keys.column_types if family == KEY_FAMILY else TYPE_FAMILIES[family]


def family_name(family: str, keys: KeyCodec) -> str:
    """``family`` as a message names it: the key type's name for the key family."""
    return keys.name if family == KEY_FAMILY else family


def _cols(spec: str) -> tuple[Column, ...]:
    """``name family meaning`` per line (meaning may have spaces)."""
    out = []
    for line in filter(None, (raw.strip() for raw in spec.splitlines())):
        name, family, meaning = line.split(maxsplit=2)
        assert family in TYPE_FAMILIES, family
        out.append(Column(name, family, meaning))
    return tuple(out)


_SESSION = "'Direct' or 'Conference'"
_CALL_PARTIES = """
caller_user_id uuid Direct sessions: the caller (null for conferences)
callee_user_id uuid Direct sessions: the callee (null for conferences)
chat_id uuid Conference sessions: the conference's chat (null for calls)
"""

QUERIES: tuple[QueryContract, ...] = (
    _payload(
        """
messages message_id Message
id uuid the message (= outbox message_id)
chat_id uuid its chat (must equal the row's chat_id)
seq integer its per-chat sequence number
sender_user_id uuid the sender (null: a system message)
kind text 'Text', 'File', 'Card' or 'System'
body text the text (null when deleted)
file_meta json {"fileId","name","size","contentType"} of a file message, else null
card_text text the card's text of a card message, else null
sent_at timestamptz when it was sent
edited_at timestamptz last edit (null: never edited)
deleted_at timestamptz deletion (null: not deleted)
"""
    ),
    _payload(
        """
read_receipts ref_id Participant
id uuid the participant (membership) row (= outbox ref_id)
chat_id uuid its chat
user_id uuid the reader
last_read_seq integer the highest seq read
last_read_at timestamptz when (null: nothing read yet)
"""
    ),
    _payload(
        """
chat_events ref_id ChatEvent
id uuid the chat event (= outbox ref_id)
chat_id uuid its chat
event_kind text what happened ('MemberAdded', 'TitleChanged', …)
actor_user_id uuid who did it (null: the system)
subject_user_id uuid whom it concerns (null: nobody)
occurred_at timestamptz when
"""
    ),
    _payload(
        """
contact_requests ref_id ContactRequest audience=addressee_user_id
id uuid the request (= outbox ref_id)
requester_user_id uuid who asked
addressee_user_id uuid who is asked (the row's target_user_id)
status text 'Pending', 'Accepted' or 'Declined'
created_at timestamptz when it was asked
"""
    ),
    _payload(
        """
contacts ref_id Contact
id uuid the contact (= outbox ref_id)
user_low uuid one party
user_high uuid the other party
request_id uuid the accepted request
accepted_by_user_id uuid who accepted
created_at timestamptz when accepted
removed_at timestamptz when removed (null: still a contact)
removed_by_user_id uuid who removed it
"""
    ),
    _payload(
        """
blacklist ref_id BlacklistEntry audience=owner_user_id
id uuid the blacklist entry (= outbox ref_id)
owner_user_id uuid who blocks (the row's target_user_id)
blocked_user_id uuid who is blocked
created_at timestamptz when blocked
removed_at timestamptz when lifted (null: still blocked)
"""
    ),
    _payload(
        """
calls ref_id Call
id uuid the 1:1 call (= outbox ref_id)
caller_user_id uuid the caller
callee_user_id uuid the callee
room_name text the media room
status text 'Ringing', 'Active', 'Declined', 'Missed', 'Cancelled' or 'Ended'
created_at timestamptz when it started ringing
answered_at timestamptz when answered (null: not answered)
ended_at timestamptz when it ended, was declined, missed or cancelled
ended_by_user_id uuid who ended it
""",
        note=" (session_kind Direct)",
    ),
    _payload(
        """
conferences ref_id Conference
id uuid the conference (= outbox ref_id)
chat_id uuid its chat
room_name text the media room
status text 'Active' or 'Ended'
started_by_user_id uuid who started it
started_at timestamptz when
ended_at timestamptz when it ended (null: live)
ended_by_user_id uuid who ended it
""",
        note="; CallInvited, CallEnded (session_kind Conference)",
    ),
    _payload(
        """
conference_participants ref_id RosterEntry
id uuid the roster entry (= outbox ref_id)
conference_id uuid its conference
user_id uuid the participant
invited_by_user_id uuid who invited them (null: joined uninvited)
invited_at timestamptz when invited (null: not invited)
joined_at timestamptz when joined (null: not yet)
left_at timestamptz when left (null: still in)
chat_id uuid the conference's chat
room_name text the conference's media room
conference_status text the conference's status: 'Active' or 'Ended'
"""
    ),
    _payload(
        f"""
recordings ref_id Recording
id uuid the recording (= outbox ref_id)
session_kind text {_SESSION}
call_id uuid the recorded call (Direct)
conference_id uuid the recorded conference (Conference)
started_by_user_id uuid who started it
status text its status
started_at timestamptz when started
stopped_at timestamptz when stopped (null: running)
available_at timestamptz when available (null: not yet)
failed_at timestamptz when it failed (null: did not)
failure_code text why it failed (a code, no PII)
{_CALL_PARTIES}"""
    ),
    _payload(
        f"""
screen_shares ref_id ScreenShare
id uuid the screen share (= outbox ref_id)
session_kind text {_SESSION}
call_id uuid the call it is shared in (Direct)
conference_id uuid the conference it is shared in (Conference)
user_id uuid who shares
started_at timestamptz when started
stopped_at timestamptz when stopped (null: sharing)
{_CALL_PARTIES}"""
    ),
    QueryContract(
        "member_chats",
        "the hub: the chat: groups of a connection",
        "user ids (not an outbox column)",
        _cols("""
user_id uuid a user of $1
chat_id uuid a chat where that user is an active member
"""),
        role="hub",
    ),
    QueryContract(
        "presence_chats",
        "the hub: the chats through which a user's presence shows (WatchPresence's consent)",
        "user ids (not an outbox column)",
        _cols("""
user_id uuid a user of $1
chat_id uuid an active chat of that user through which their presence may be seen
"""),
        role="presence",
    ),
    QueryContract(
        "deleted_chats",
        "a row whose referenced entity is missing: TargetGone or quarantine",
        "chat_id",
        _cols("""
chat_id uuid a chat of $1 known to be deleted (a soft-delete column, a tombstone)
"""),
        role="optional",
    ),
    QueryContract(
        "chat_alive",
        "deprecated (deleted_chats replaces it): a missing entity's chat left out is TargetGone",
        "chat_id",
        _cols("""
chat_id uuid a chat of $1 that is not gone (leave out only the chats known to be deleted)
"""),
        role="deprecated",
    ),
    QueryContract(
        "member_spans",
        "GET /api/sync: which chat rows of the log are the caller's",
        "one user id ($1 uuid, not an array)",
        _cols("""
chat_id uuid a chat the user of $1 is or was a member of
joined_at timestamptz when that membership began
left_at timestamptz when it ended (null: still a member)
"""),
        role="sync",
        takes="key",
    ),
)

CONTRACT: MappingProxyType[str, QueryContract] = MappingProxyType({q.name: q for q in QUERIES})
