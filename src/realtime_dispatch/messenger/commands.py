"""Owner commands of the reference messenger service, in one import. Each command writes its
domain change and its push intent(s) in one transaction (persist-then-push); the REST API
(:mod:`realtime_dispatch.messenger.api`) calls these. The implementations live in one module
per area: ``chats``, ``messages``, ``reads``, ``contacts``, ``blacklist``, ``calls``,
``conferences``, ``recordings``, ``screenshare``, ``reaper``.
"""

from __future__ import annotations

from realtime_dispatch.contracts.messenger_rest import MessageKind
from realtime_dispatch.messenger.access import require_active_member
from realtime_dispatch.messenger.blacklist import block_user, list_blocked, unblock_user
from realtime_dispatch.messenger.calls import (
    answer_call,
    cancel_call,
    decline_call,
    end_call,
    get_call,
    list_calls,
    start_call,
)
from realtime_dispatch.messenger.chats import (
    add_participant,
    create_chat,
    get_chat,
    list_chats,
    remove_participant,
    rename_chat,
    set_participant,
)
from realtime_dispatch.messenger.conferences import (
    end_conference,
    get_conference,
    invite_to_conference,
    join_conference,
    leave_conference,
    live_conference,
    start_conference,
)
from realtime_dispatch.messenger.contacts import (
    accept_contact,
    decline_contact,
    list_contacts,
    list_requests,
    remove_contact,
    request_contact,
)
from realtime_dispatch.messenger.membership import notify_membership
from realtime_dispatch.messenger.messages import (
    EDIT_WINDOW_SECONDS,
    MessageContent,
    SentMessage,
    delete_message,
    edit_message,
    list_messages,
    send_message,
)
from realtime_dispatch.messenger.reads import mark_read
from realtime_dispatch.messenger.reaper import reap_unanswered_calls
from realtime_dispatch.messenger.recordings import (
    get_recording,
    mark_recording_available,
    mark_recording_failed,
    start_recording,
    stop_recording,
)
from realtime_dispatch.messenger.refusals import (
    Conflict,
    DomainError,
    Forbidden,
    InvalidInput,
    NotFound,
)
from realtime_dispatch.messenger.screenshare import (
    get_screen_share,
    start_screen_share,
    stop_screen_share,
)

__all__ = [
    "EDIT_WINDOW_SECONDS",
    "Conflict",
    "DomainError",
    "Forbidden",
    "InvalidInput",
    "MessageContent",
    "MessageKind",
    "NotFound",
    "SentMessage",
    "accept_contact",
    "add_participant",
    "answer_call",
    "block_user",
    "cancel_call",
    "create_chat",
    "decline_call",
    "decline_contact",
    "delete_message",
    "edit_message",
    "end_call",
    "end_conference",
    "get_call",
    "get_chat",
    "get_conference",
    "get_recording",
    "get_screen_share",
    "invite_to_conference",
    "join_conference",
    "leave_conference",
    "list_blocked",
    "list_calls",
    "list_chats",
    "list_contacts",
    "list_messages",
    "list_requests",
    "live_conference",
    "mark_read",
    "mark_recording_available",
    "mark_recording_failed",
    "notify_membership",
    "reap_unanswered_calls",
    "remove_contact",
    "remove_participant",
    "rename_chat",
    "request_contact",
    "require_active_member",
    "send_message",
    "set_participant",
    "start_call",
    "start_conference",
    "start_recording",
    "start_screen_share",
    "stop_recording",
    "stop_screen_share",
    "unblock_user",
]
