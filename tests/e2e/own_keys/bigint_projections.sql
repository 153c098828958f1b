-- The manifest of bigint_schema.sql, with REALTIME_KEY_TYPE=bigint: each query takes
-- $1 bigint[], its id columns are bigint.

-- name: messages
-- A boolean `removed` becomes the contract's deleted_at: the time it was removed, else null.
SELECT id, room_id AS chat_id, number AS seq, author_id AS sender_user_id, 'Text' AS kind,
       body, NULL::jsonb AS file_meta, NULL::text AS card_text, sent_at, edited_at,
       CASE WHEN removed THEN coalesce(removed_at, sent_at) END AS deleted_at
FROM talk_post WHERE id = ANY($1::bigint[]);

-- name: read_receipts
SELECT id, room_id AS chat_id, account_id AS user_id, last_read_number AS last_read_seq,
       last_read_at
FROM talk_member WHERE id = ANY($1::bigint[]);

-- name: contact_requests
SELECT id, from_id AS requester_user_id, to_id AS addressee_user_id,
       (ARRAY['Pending', 'Accepted', 'Declined'])[status + 1] AS status, created_at
FROM talk_invite WHERE id = ANY($1::bigint[]);

-- name: member_chats
SELECT account_id AS user_id, room_id AS chat_id
FROM talk_member WHERE account_id = ANY($1::bigint[]) AND left_at IS NULL;
