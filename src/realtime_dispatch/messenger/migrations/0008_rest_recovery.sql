-- What REST needs to be the source of truth for every pushed state.

-- Idempotent send: one row per (chat, sender, clientMessageId), claimed by the sending
-- statement before it takes a seq. A concurrent repeat waits on this key and then writes
-- nothing; the fingerprint of the first request's content tells a retry from a reuse (409).
CREATE TABLE messenger.message_client_ids (
    chat_id           uuid        NOT NULL REFERENCES messenger.chats (id) ON DELETE CASCADE,
    sender_user_id    uuid        NOT NULL,
    client_message_id varchar(64) NOT NULL,
    message_id        uuid        NOT NULL,
    fingerprint       bytea       NOT NULL,
    PRIMARY KEY (chat_id, sender_user_id, client_message_id)
);

-- "My chats", most recently active first: moved by every send and every title change.
ALTER TABLE messenger.chats ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
UPDATE messenger.chats c SET updated_at = greatest(c.created_at,
    coalesce((SELECT m.sent_at FROM messenger.messages m
              WHERE m.chat_id = c.id AND m.seq = c.last_seq), c.created_at));
CREATE INDEX ix_chats_updated ON messenger.chats (updated_at DESC, id DESC);

-- A contact request can be declined by its addressee.
ALTER TABLE messenger.contact_requests DROP CONSTRAINT ck_contact_requests_status;
ALTER TABLE messenger.contact_requests ADD CONSTRAINT ck_contact_requests_status
    CHECK (status IN ('Pending', 'Accepted', 'Declined'));
CREATE INDEX ix_contact_requests_requester
    ON messenger.contact_requests (requester_user_id) WHERE status = 'Pending';

-- Calls of a user, by status.
CREATE INDEX ix_call_sessions_caller ON messenger.call_sessions (caller_user_id, status);
CREATE INDEX ix_call_sessions_callee ON messenger.call_sessions (callee_user_id, status);
