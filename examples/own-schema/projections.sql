-- The projection manifest for schema.sql: REALTIME_PROJECTIONS=examples/own-schema/projections.sql
-- Each query returns the columns of its contract (docs/reference.md, "Projection manifest"),
-- under the contract's names; enums stored as integers are turned into the contract's strings
-- here. `realtime-dispatch check` verifies it against the database. The kinds whose query is
-- left out (contacts, conferences, recordings, …) are disabled: their rows are quarantined.

-- name: messages
-- Posts of a soft-deleted conversation are left out: deleted_chats then says the chat is gone,
-- and their rows end TargetGone instead of being delivered.
SELECT p."Id" AS id, p."ConversationId" AS chat_id, p."Number" AS seq,
       p."AuthorId" AS sender_user_id,
       CASE p."Type" WHEN 0 THEN 'Text' WHEN 1 THEN 'File' WHEN 2 THEN 'Card' ELSE 'System' END
           AS kind,
       p."Text" AS body, p."Attachment" AS file_meta, p."CardMarkdown" AS card_text,
       p."PostedUtc" AS sent_at, p."EditedUtc" AS edited_at, p."RemovedUtc" AS deleted_at
FROM "Posts" p
JOIN "Conversations" c ON c."Id" = p."ConversationId" AND c."DeletedUtc" IS NULL
WHERE p."Id" = ANY($1);

-- name: read_receipts
SELECT "Id" AS id, "ConversationId" AS chat_id, "AccountId" AS user_id,
       "LastSeenNumber" AS last_read_seq, "LastSeenUtc" AS last_read_at
FROM "ConversationMembers"
WHERE "Id" = ANY($1);

-- name: calls
SELECT "Id" AS id, "CallerId" AS caller_user_id, "CalleeId" AS callee_user_id,
       "Room" AS room_name,
       (ARRAY['Ringing', 'Active', 'Declined', 'Missed', 'Cancelled', 'Ended'])["State" + 1]
           AS status,
       "RingingUtc" AS created_at, "AnsweredUtc" AS answered_at, "FinishedUtc" AS ended_at,
       "FinishedById" AS ended_by_user_id
FROM "VoiceCalls"
WHERE "Id" = ANY($1);

-- name: member_chats
SELECT "AccountId" AS user_id, "ConversationId" AS chat_id
FROM "ConversationMembers"
WHERE "AccountId" = ANY($1) AND "LeftUtc" IS NULL;

-- name: deleted_chats
-- Of the given conversations, those known to be deleted (soft-deleted). A conversation id that
-- never existed is not returned: a row referencing it is the writer's defect, quarantined.
SELECT "Id" AS chat_id FROM "Conversations" WHERE "Id" = ANY($1) AND "DeletedUtc" IS NOT NULL;

-- name: member_spans
-- GET /api/sync: one account's memberships, left ones too. A post is the account's to resume
-- when it was written between "JoinedUtc" and "LeftUtc". Each row examined probes
-- "IX_ConversationMembers_ConversationId_AccountId".
SELECT "ConversationId" AS chat_id, "JoinedUtc" AS joined_at, "LeftUtc" AS left_at
FROM "ConversationMembers"
WHERE "AccountId" = $1;
