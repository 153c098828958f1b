-- The projection manifest for schema.sql (REALTIME_KEY_TYPE=text):
-- REALTIME_PROJECTIONS=examples/node-writer/projections.sql. Only messages are pushed here; the
-- kinds whose query is left out are disabled (their rows are quarantined as KindDisabled).

-- name: messages
SELECT m."id" AS id, m."conversationId" AS chat_id, m."seq" AS seq,
       m."authorId" AS sender_user_id, 'Text' AS kind, m."body" AS body,
       NULL::jsonb AS file_meta, NULL::text AS card_text,
       m."sentAt" AS sent_at, m."editedAt" AS edited_at, m."deletedAt" AS deleted_at
FROM "Message" m
JOIN "Conversation" c ON c."id" = m."conversationId" AND c."deletedAt" IS NULL
WHERE m."id" = ANY($1::text[]);

-- name: member_chats
SELECT "accountId" AS user_id, "conversationId" AS chat_id
FROM "Member"
WHERE "accountId" = ANY($1::text[]) AND "leftAt" IS NULL;

-- name: deleted_chats
SELECT "id" AS chat_id FROM "Conversation" WHERE "id" = ANY($1::text[]) AND "deletedAt" IS NOT NULL;

-- name: member_spans
-- One account's memberships, left ones too: a rejoin is a new row, so the time between a leave
-- and the rejoin is nobody's to resume. Both times are the database's now().
SELECT "conversationId" AS chat_id, "joinedAt" AS joined_at, "leftAt" AS left_at
FROM "Member"
WHERE "accountId" = $1;
