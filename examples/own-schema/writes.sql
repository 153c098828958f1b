-- How the adopter's own code writes: plain SQL, each group in one transaction with the domain
-- change. The outbox row carries ids only; its id is left out (the database makes it:
-- messenger.realtime_new_id()). Any language, any driver, EF Core's ExecuteSql or a
-- SaveChanges of a mapped entity (docs/adopting.md) does the same.

-- name: create_conversation
INSERT INTO "Conversations" ("Id", "Topic") VALUES ($1, $2);

-- name: add_member
-- The membership trigger notifies the hubs when this commits.
INSERT INTO "ConversationMembers" ("Id", "ConversationId", "AccountId") VALUES ($1, $2, $3);

-- name: next_number
-- Send a post, step 1: the next per-conversation number, under the conversation's row lock.
UPDATE "Conversations" SET "LastNumber" = "LastNumber" + 1
WHERE "Id" = $1 AND "DeletedUtc" IS NULL
RETURNING "LastNumber";

-- name: insert_post
-- Step 2: the post.
INSERT INTO "Posts" ("Id", "ConversationId", "Number", "AuthorId", "Type", "Text")
VALUES ($1, $2, $3, $4, 0, $5);

-- name: outbox_message_received
-- Step 3, same transaction: the push intent (chat group, message id, seq).
INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)
VALUES ('MessageReceived', 'ChatGroup', $1, $2, $3);

-- name: mark_read
UPDATE "ConversationMembers" SET "LastSeenNumber" = $3, "LastSeenUtc" = now()
WHERE "ConversationId" = $1 AND "AccountId" = $2
RETURNING "Id";

-- name: outbox_read_receipt
-- ref_id: the member row whose read mark changed.
INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, ref_id)
VALUES ('ReadReceiptUpdated', 'ChatGroup', $1, $2);

-- name: start_call
INSERT INTO "VoiceCalls" ("Id", "CallerId", "CalleeId", "Room") VALUES ($1, $2, $3, $4);

-- name: outbox_call_invited
-- A 1:1 call invite goes to the callee (User target, session_kind Direct, ref_id the call).
INSERT INTO messenger.realtime_outbox (kind, target_kind, target_user_id, ref_id, session_kind)
VALUES ('CallInvited', 'User', $1, $2, 'Direct');
