-- The projection manifest of the talk app's tables (REALTIME_PROJECTIONS=examples/django/projections.sql,
-- with REALTIME_KEY_TYPE=bigint): each query takes $1 bigint[] (member_spans: $1 bigint) and
-- returns the columns of its contract (docs/reference.md, "Projection manifest"). Django's
-- auth_user.id is an integer: fine for bigint keys. The kinds left out (calls, contacts, …) are
-- disabled: their rows are quarantined. `realtime-dispatch check` verifies it.

-- name: messages
-- MessageReceived, MessageEdited and MessageDeleted. The boolean `removed` becomes the
-- contract's deleted_at. Posts of a soft-deleted room are left out: deleted_chats then says the
-- room is gone, and their rows end TargetGone.
SELECT p.id, p.room_id AS chat_id, p.number AS seq, p.author_id AS sender_user_id,
       'Text' AS kind, p.body, NULL::jsonb AS file_meta, NULL::text AS card_text,
       p.sent_at, p.edited_at,
       CASE WHEN p.removed THEN coalesce(p.removed_at, p.edited_at, p.sent_at) END AS deleted_at
FROM talk_post p
JOIN talk_room r ON r.id = p.room_id AND r.deleted_at IS NULL
WHERE p.id = ANY($1::bigint[]);

-- name: read_receipts
-- ReadReceiptUpdated: ref_id is the membership row.
SELECT id, room_id AS chat_id, user_id, last_read_number AS last_read_seq, last_read_at
FROM talk_member
WHERE id = ANY($1::bigint[]);

-- name: member_chats
-- The truth behind every membership hint: a user's current rooms (any current row).
SELECT m.user_id, m.room_id AS chat_id
FROM talk_member m
WHERE m.user_id = ANY($1::bigint[]) AND m.left_at IS NULL;

-- name: deleted_chats
-- Of the given rooms, those known to be deleted. A room id that never existed is not returned:
-- a row referencing it is the writer's defect, quarantined with an alert.
SELECT id AS chat_id FROM talk_room WHERE id = ANY($1::bigint[]) AND deleted_at IS NOT NULL;

-- name: member_spans
-- GET /api/sync: one user's memberships, left ones too, each rejoin its own span. Probes
-- talk_member_user_room.
SELECT room_id AS chat_id, joined_at, left_at
FROM talk_member
WHERE user_id = $1::bigint;

-- The app's own kinds: reactions. Registered when hub, worker or check starts with this file;
-- `realtime-dispatch kinds --typescript` prints their payload types.

-- kind: ReactionAdded
-- target: chat
-- event: reaction_added
-- The reaction as it is when delivered: {eventId, chatId, refId, messageId, userId, emoji,
-- createdAt}. A reaction removed before delivery is not returned: deleted_chats decides (a
-- deleted room: TargetGone; else quarantined, as a mistyped id would be).
SELECT r.id AS ref_id, p.room_id AS chat_id, r.post_id AS message_id, r.user_id, r.emoji,
       r.created_at
FROM talk_reaction r
JOIN talk_post p ON p.id = r.post_id
JOIN talk_room rm ON rm.id = p.room_id AND rm.deleted_at IS NULL
WHERE r.id = ANY($1::bigint[]);

-- kind: ReactionRemoved
-- target: chat
-- event: reaction_removed
-- payload: ids
-- The reaction's row is gone (a hard delete): the payload is the outbox row's own ids,
-- {eventId, chatId, refId, messageId}.
