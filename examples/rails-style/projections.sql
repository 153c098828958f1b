-- The projection manifest (REALTIME_PROJECTIONS) over schema.sql + realtime.sql, bigint keys.
-- Times: the app's columns are timestamp without time zone in UTC, so each says its zone.
-- name: messages
SELECT n.id, n.conversation_id AS chat_id, n.position AS seq, n.account_id AS sender_user_id,
       'Text' AS kind, n.content AS body, NULL::jsonb AS file_meta, NULL::text AS card_text,
       n.created_at AT TIME ZONE 'UTC' AS sent_at,
       CASE WHEN n.updated_at > n.created_at THEN n.updated_at AT TIME ZONE 'UTC' END AS edited_at,
       CASE WHEN n.removed THEN n.updated_at AT TIME ZONE 'UTC' END AS deleted_at
FROM notes n
WHERE n.id = ANY($1);

-- name: read_receipts
SELECT p.id, p.conversation_id AS chat_id, p.account_id AS user_id,
       p.last_read_position AS last_read_seq, p.last_read_at AT TIME ZONE 'UTC' AS last_read_at
FROM participations p
WHERE p.id = ANY($1);

-- name: member_chats
SELECT account_id AS user_id, conversation_id AS chat_id
FROM participations
WHERE account_id = ANY($1) AND NOT removed;

-- name: deleted_chats
SELECT chat_id FROM realtime_chat_tombstones WHERE chat_id = ANY($1);

-- name: member_spans
SELECT conversation_id AS chat_id, realtime_joined_at AS joined_at,
       realtime_left_at AS left_at
FROM participations
WHERE account_id = $1;
