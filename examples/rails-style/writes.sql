-- The app's writes, each with its outbox row in the same transaction (what an ActiveRecord
-- `transaction do … end` or Laravel's DB::transaction sends). Parameters: see each name.

-- name: post_note
-- $1 conversation, $2 author, $3 content: the position under the conversation's row lock
WITH c AS (UPDATE conversations SET notes_count = notes_count + 1,
                  updated_at = now() AT TIME ZONE 'UTC'
           WHERE id = $1 RETURNING id, notes_count),
     n AS (INSERT INTO notes (conversation_id, position, account_id, content, created_at, updated_at)
           SELECT id, notes_count, $2, $3, now() AT TIME ZONE 'UTC', now() AT TIME ZONE 'UTC' FROM c
           RETURNING id, conversation_id, position)
INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)
SELECT 'MessageReceived', 'ChatGroup', conversation_id, id, position FROM n
RETURNING message_id;

-- name: edit_note
-- $1 note, $2 content
WITH n AS (UPDATE notes SET content = $2, updated_at = now() AT TIME ZONE 'UTC'
           WHERE id = $1 AND NOT removed RETURNING id, conversation_id, position)
INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)
SELECT 'MessageEdited', 'ChatGroup', conversation_id, id, position FROM n;

-- name: remove_note
-- $1 note
WITH n AS (UPDATE notes SET removed = true, updated_at = now() AT TIME ZONE 'UTC'
           WHERE id = $1 AND NOT removed RETURNING id, conversation_id, position)
INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id, seq)
SELECT 'MessageDeleted', 'ChatGroup', conversation_id, id, position FROM n;

-- name: mark_read
-- $1 conversation, $2 account, $3 position; ref_id = the participation's surrogate id
WITH p AS (UPDATE participations SET last_read_position = greatest(last_read_position, $3),
                  last_read_at = now() AT TIME ZONE 'UTC', updated_at = now() AT TIME ZONE 'UTC'
           WHERE conversation_id = $1 AND account_id = $2 AND NOT removed
           RETURNING id, conversation_id)
INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, ref_id)
SELECT 'ReadReceiptUpdated', 'ChatGroup', conversation_id, id FROM p;

-- name: set_removed
-- $1 conversation, $2 account, $3 removed (the span and the hub's hint follow by trigger)
UPDATE participations SET removed = $3, updated_at = now() AT TIME ZONE 'UTC'
WHERE conversation_id = $1 AND account_id = $2;
