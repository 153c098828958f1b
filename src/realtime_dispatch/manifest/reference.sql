-- The reference messenger's projections: the manifest used when REALTIME_PROJECTIONS is unset.
-- Each payload query takes $1 uuid[] (the batch's reference ids) and returns the columns of
-- its contract (docs/reference.md, "Projection manifest"). An adopter's manifest has the same
-- names and columns, over the adopter's own tables.

-- name: messages
-- The messages a batch references; the builder checks each row's chat against chat_id.
SELECT id, chat_id, seq, sender_user_id, kind, body, file_meta, card_text,
       sent_at, edited_at, deleted_at
FROM messenger.messages
WHERE id = ANY($1::uuid[]);

-- name: read_receipts
-- ref_id = the participant row; its current read mark is pushed.
SELECT id, chat_id, user_id, last_read_seq, last_read_at
FROM messenger.participants WHERE id = ANY($1::uuid[]);

-- name: chat_events
SELECT id, chat_id, event_kind, actor_user_id, subject_user_id, occurred_at
FROM messenger.chat_events WHERE id = ANY($1::uuid[]);

-- name: contact_requests
SELECT id, requester_user_id, addressee_user_id, status, created_at
FROM messenger.contact_requests WHERE id = ANY($1::uuid[]);

-- name: contacts
SELECT id, user_low, user_high, request_id, accepted_by_user_id, created_at, removed_at,
       removed_by_user_id
FROM messenger.contacts WHERE id = ANY($1::uuid[]);

-- name: blacklist
SELECT id, owner_user_id, blocked_user_id, created_at, removed_at
FROM messenger.blacklist WHERE id = ANY($1::uuid[]);

-- name: calls
-- media_withheld (optional): one party has blocked the other (messenger/access.py), so the
-- call's pushes, their retries and their sync events carry no join credentials for either;
-- the parties ask POST /api/calls/{id}/media, which refuses the blocked one.
SELECT c.id, c.caller_user_id, c.callee_user_id, c.room_name, c.status, c.created_at,
       c.answered_at, c.ended_at, c.ended_by_user_id,
       EXISTS (SELECT 1 FROM messenger.blacklist b
               WHERE b.removed_at IS NULL
                 AND ((b.owner_user_id = c.caller_user_id AND b.blocked_user_id = c.callee_user_id)
                   OR (b.owner_user_id = c.callee_user_id
                       AND b.blocked_user_id = c.caller_user_id))) AS media_withheld
FROM messenger.call_sessions c WHERE c.id = ANY($1::uuid[]);

-- name: conferences
-- media_withheld (optional; migration 0026, the blacklist of messenger/access.py): a member of
-- the chat is blocked in it by another, so chat-wide pushes carry no join credentials.
SELECT c.id, c.chat_id, c.room_name, c.status, c.started_by_user_id, c.started_at, c.ended_at,
       c.ended_by_user_id,
       messenger.media_withheld(c.chat_id) AS media_withheld
FROM messenger.conference_sessions c WHERE c.id = ANY($1::uuid[]);

-- name: conference_participants
SELECT p.id, p.conference_id, p.user_id, p.invited_by_user_id, p.invited_at, p.joined_at,
       p.left_at, c.chat_id, c.room_name, c.status AS conference_status,
       messenger.media_withheld(c.chat_id) AS media_withheld
FROM messenger.conference_participants p
JOIN messenger.conference_sessions c ON c.id = p.conference_id
WHERE p.id = ANY($1::uuid[]);

-- name: recordings
SELECT r.id, r.session_kind, r.call_id, r.conference_id, r.started_by_user_id, r.status,
       r.started_at, r.stopped_at, r.available_at, r.failed_at, r.failure_code,
       cs.caller_user_id, cs.callee_user_id, cf.chat_id
FROM messenger.call_recordings r
LEFT JOIN messenger.call_sessions cs ON cs.id = r.call_id
LEFT JOIN messenger.conference_sessions cf ON cf.id = r.conference_id
WHERE r.id = ANY($1::uuid[]);

-- name: screen_shares
SELECT s.id, s.session_kind, s.call_id, s.conference_id, s.user_id, s.started_at,
       s.stopped_at, cs.caller_user_id, cs.callee_user_id, cf.chat_id
FROM messenger.screen_shares s
LEFT JOIN messenger.call_sessions cs ON cs.id = s.call_id
LEFT JOIN messenger.conference_sessions cf ON cf.id = s.conference_id
WHERE s.id = ANY($1::uuid[]);

-- name: member_chats
-- The hub: the active chats of the given users (on connect, and after its feed reconnects).
SELECT user_id, chat_id FROM messenger.participants
WHERE user_id = ANY($1::uuid[]) AND active;

-- name: presence_chats
-- The hub (WatchPresence): the chats through which each of the given users' presence shows.
-- Consent: a chat the user took part in, i.e. created, read in (a read mark past 0) or sent a
-- message to. Being added by someone else is not enough: a chat one side made alone shows
-- nothing of the other.
SELECT p.user_id, p.chat_id
FROM messenger.participants p
JOIN messenger.chats c ON c.id = p.chat_id
WHERE p.user_id = ANY($1::uuid[]) AND p.active
  AND (c.created_by = p.user_id OR p.last_read_seq > 0
       OR EXISTS (SELECT 1 FROM messenger.messages m
                  WHERE m.chat_id = p.chat_id AND m.sender_user_id = p.user_id));

-- name: deleted_chats
-- Of the given chats, those deleted: a deleted chat leaves a tombstone (migration 0013), so a
-- deleted chat's rows end TargetGone, while a row whose chat id never existed is quarantined
-- as the writer's defect.
SELECT chat_id FROM messenger.chat_tombstones WHERE chat_id = ANY($1::uuid[]);

-- name: member_spans
-- GET /api/sync: the caller's memberships. Only the active ones, each open from when it began:
-- a removed member gets nothing more of the chat, not even what was written while a member.
-- (Sync on this schema runs its own `page` query, which probes the participant row the same
-- way; this query says the rule in the manifest's terms.)
SELECT chat_id, joined_at, NULL::timestamptz AS left_at
FROM messenger.participants
WHERE user_id = $1 AND active;
