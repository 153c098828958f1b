from uuid import uuid4

import pytest

from realtime_dispatch import enqueue_statement
from realtime_dispatch.errors import IntentError
from realtime_dispatch.outbox.enqueue import enqueue_select_sql
from realtime_dispatch.outbox.model import (
    OutboxIntent,
    RealtimeDispatchKind,
    RealtimeTargetKind,
    SessionKind,
)

K = RealtimeDispatchKind
T = RealtimeTargetKind


SPEC_KINDS = [
    "MessageReceived",
    "MessageEdited",
    "MessageDeleted",
    "ReadReceiptUpdated",
    "ChatUpdated",
    "ContactRequestReceived",
    "ContactRequestAccepted",
    "ContactRemoved",
    "CallInvited",
    "CallAnswered",
    "CallDeclined",
    "CallMissed",
    "CallCancelled",
    "CallEnded",
    "ConferenceInvited",
    "ConferenceStarted",
    "ConferenceEnded",
    "ConferenceParticipantJoined",
    "ConferenceParticipantLeft",
    "RecordingStarted",
    "RecordingStopped",
    "RecordingAvailable",
    "RecordingFailed",
    "ScreenShareStarted",
    "ScreenShareStopped",
    "BlacklistChanged",
]


def test_there_are_the_specs_26_kinds_with_snake_case_events() -> None:
    """The spec's 26 are built in (a kind added to the catalogue beside them is not an error
    here: the catalogue's own test checks it)."""
    assert len(set(SPEC_KINDS)) == 26
    assert set(SPEC_KINDS) <= {k.value for k in K}
    assert K.MESSAGE_RECEIVED.event_name == "message_received"
    assert K.READ_RECEIPT_UPDATED.event_name == "read_receipt_updated"
    assert K.CALL_INVITED.event_name == "call_invited"
    assert K.CONFERENCE_PARTICIPANT_JOINED.event_name == "conference_participant_joined"
    assert len({k.event_name for k in K}) == len(K)


def test_message_kinds_need_chat_message_and_seq() -> None:
    chat, msg = uuid4(), uuid4()
    intent = OutboxIntent(K.MESSAGE_RECEIVED, T.CHAT_GROUP, chat_id=chat, message_id=msg, seq=1)
    assert intent.group == f"chat:{chat}"
    with pytest.raises(IntentError, match="needs seq"):
        OutboxIntent(K.MESSAGE_EDITED, T.CHAT_GROUP, chat_id=chat, message_id=msg)
    with pytest.raises(IntentError, match="needs message_id"):
        OutboxIntent(K.MESSAGE_DELETED, T.CHAT_GROUP, chat_id=chat, seq=1)
    with pytest.raises(IntentError, match="ChatGroup target needs chat_id"):
        OutboxIntent(K.MESSAGE_RECEIVED, T.CHAT_GROUP, message_id=msg, seq=1)
    with pytest.raises(IntentError, match="goes to a ChatGroup"):
        OutboxIntent(K.MESSAGE_RECEIVED, T.USER, target_user_id=uuid4(), message_id=msg, seq=1)


def test_user_kinds_go_to_user_group() -> None:
    user = uuid4()
    intent = OutboxIntent(K.CONTACT_REQUEST_RECEIVED, T.USER, target_user_id=user, ref_id=uuid4())
    assert intent.group == f"user:{user}"
    with pytest.raises(IntentError, match="needs ref_id"):
        OutboxIntent(K.BLACKLIST_CHANGED, T.USER, target_user_id=user)


def test_media_kinds_follow_session_kind() -> None:
    user, chat, ref = uuid4(), uuid4(), uuid4()
    direct = OutboxIntent(
        K.CALL_INVITED, T.USER, target_user_id=user, ref_id=ref, session_kind=SessionKind.DIRECT
    )
    assert direct.group == f"user:{user}"
    conf = OutboxIntent(
        K.CONFERENCE_INVITED,
        T.CHAT_GROUP,
        chat_id=chat,
        ref_id=ref,
        session_kind=SessionKind.CONFERENCE,
    )
    assert conf.group == f"chat:{chat}"
    with pytest.raises(IntentError, match="needs session_kind"):
        OutboxIntent(K.CALL_ENDED, T.USER, target_user_id=user, ref_id=ref)
    with pytest.raises(IntentError, match="goes to a ChatGroup"):
        OutboxIntent(
            K.RECORDING_STARTED,
            T.USER,
            target_user_id=user,
            ref_id=ref,
            session_kind=SessionKind.CONFERENCE,
        )
    with pytest.raises(IntentError, match="takes no session_kind"):
        OutboxIntent(
            K.CHAT_UPDATED, T.CHAT_GROUP, chat_id=chat, ref_id=ref, session_kind=SessionKind.DIRECT
        )


def test_negative_seq_refused() -> None:
    with pytest.raises(IntentError, match="seq"):
        OutboxIntent(K.MESSAGE_RECEIVED, T.CHAT_GROUP, chat_id=uuid4(), message_id=uuid4(), seq=-1)


def test_driver_neutral_statement() -> None:
    chat, msg = uuid4(), uuid4()
    intent = OutboxIntent(K.MESSAGE_RECEIVED, T.CHAT_GROUP, chat_id=chat, message_id=msg, seq=5)
    stmt = enqueue_statement(intent)
    assert stmt.sql.startswith("INSERT INTO messenger.realtime_outbox")
    assert "%(kind)s" in stmt.sql
    assert ":kind" in stmt.sqlalchemy_sql
    assert "%(" not in stmt.sqlalchemy_sql
    assert stmt.params["kind"] == "MessageReceived"
    assert stmt.params["chat_id"] == chat
    assert stmt.params["seq"] == 5
    assert stmt.params["id"].version == 7  # type: ignore[union-attr]


def test_outbox_insert_for_a_data_modifying_cte() -> None:
    values = {"seq": "src.seq", "kind": "$2", "id": "$1", "chat_id": "$4", "target_kind": "$3"}
    assert enqueue_select_sql(values, "src") == (
        "INSERT INTO messenger.realtime_outbox (id, kind, target_kind, chat_id, seq)"
        " SELECT $1, $2, $3, $4, src.seq FROM src"
    )  # the table's column order, whatever the mapping's
    with pytest.raises(ValueError, match="unknown \\['sequence'\\]"):
        enqueue_select_sql({**values, "sequence": "1"}, "src")
    with pytest.raises(ValueError, match="missing \\['target_kind'\\]"):
        enqueue_select_sql({k: v for k, v in values.items() if k != "target_kind"}, "src")


def test_claimed_row_intent_checks_every_row_after_a_valid_one_of_its_kind() -> None:
    from dataclasses import replace
    from datetime import UTC, datetime

    from realtime_dispatch.errors import IntentError
    from realtime_dispatch.outbox.model import ClaimedRow, OutboxIntent

    chat, message = uuid4(), uuid4()
    valid = ClaimedRow(
        id=uuid4(),
        kind="MessageReceived",
        target_kind="ChatGroup",
        chat_id=chat,
        target_user_id=None,
        message_id=message,
        ref_id=None,
        session_kind=None,
        seq=3,
        attempts=1,
        row_version=1,
        created_at=datetime.now(UTC),
    )
    for _ in range(2):  # the second time through the remembered shape
        intent = valid.intent()
        assert intent == OutboxIntent(
            kind=RealtimeDispatchKind.MESSAGE_RECEIVED,
            target_kind=RealtimeTargetKind.CHAT_GROUP,
            chat_id=chat,
            message_id=message,
            seq=3,
        )
        assert intent.group == f"chat:{chat}"
    for broken, code in [
        (replace(valid, seq=-1), "InvalidSeq"),
        (replace(valid, message_id=None), "MissingMessageId"),
        (replace(valid, chat_id=None), "MissingChatId"),
        (replace(valid, session_kind="Direct"), "UnexpectedSessionKind"),
        (replace(valid, kind="NoSuchKind"), "UnknownEnumValue"),
    ]:
        with pytest.raises(IntentError) as caught:
            broken.intent()
        assert caught.value.code == code
