-- The owner service's chat-side domain beyond messages: the chat event feed, read state,
-- contacts and contact requests, and the blacklist. Rows hold ids, enums and times; a push row
-- in messenger.realtime_outbox references them by id (ref_id) and is built at delivery.

-- Read state: participants.last_read_seq exists (0002); when it last moved.
ALTER TABLE messenger.participants ADD COLUMN last_read_at timestamptz NULL;

-- The chat's system feed: member added / removed / left, title changed.
CREATE TABLE messenger.chat_events (
    id              uuid        PRIMARY KEY,
    chat_id         uuid        NOT NULL REFERENCES messenger.chats (id) ON DELETE CASCADE,
    event_kind      varchar(24) NOT NULL,
    actor_user_id   uuid        NULL,
    subject_user_id uuid        NULL,
    occurred_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_chat_events_kind CHECK (
        event_kind IN ('MemberAdded', 'MemberRemoved', 'MemberLeft', 'TitleChanged'))
);
CREATE INDEX ix_chat_events_chat ON messenger.chat_events (chat_id, occurred_at);

-- A request from one user to another to become contacts.
CREATE TABLE messenger.contact_requests (
    id                uuid        PRIMARY KEY,
    requester_user_id uuid        NOT NULL,
    addressee_user_id uuid        NOT NULL,
    status            varchar(12) NOT NULL DEFAULT 'Pending',
    created_at        timestamptz NOT NULL DEFAULT now(),
    responded_at      timestamptz NULL,
    CONSTRAINT ck_contact_requests_status CHECK (status IN ('Pending', 'Accepted')),
    CONSTRAINT ck_contact_requests_distinct CHECK (requester_user_id <> addressee_user_id)
);
CREATE UNIQUE INDEX uq_contact_requests_pending
    ON messenger.contact_requests (requester_user_id, addressee_user_id) WHERE status = 'Pending';
CREATE INDEX ix_contact_requests_addressee
    ON messenger.contact_requests (addressee_user_id) WHERE status = 'Pending';

-- A contact relation, stored once per pair (user_low < user_high); removal keeps the row.
CREATE TABLE messenger.contacts (
    id                 uuid        PRIMARY KEY,
    user_low           uuid        NOT NULL,
    user_high          uuid        NOT NULL,
    request_id         uuid        NULL REFERENCES messenger.contact_requests (id),
    accepted_by_user_id uuid        NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    removed_at         timestamptz NULL,
    removed_by_user_id uuid        NULL,
    CONSTRAINT ck_contacts_ordered CHECK (user_low < user_high)
);
CREATE UNIQUE INDEX uq_contacts_pair_active
    ON messenger.contacts (user_low, user_high) WHERE removed_at IS NULL;
CREATE INDEX ix_contacts_high ON messenger.contacts (user_high) WHERE removed_at IS NULL;

-- owner_user_id has blocked blocked_user_id (until removed_at).
CREATE TABLE messenger.blacklist (
    id              uuid        PRIMARY KEY,
    owner_user_id   uuid        NOT NULL,
    blocked_user_id uuid        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    removed_at      timestamptz NULL,
    CONSTRAINT ck_blacklist_distinct CHECK (owner_user_id <> blocked_user_id)
);
CREATE UNIQUE INDEX uq_blacklist_active
    ON messenger.blacklist (owner_user_id, blocked_user_id) WHERE removed_at IS NULL;
CREATE INDEX ix_blacklist_blocked
    ON messenger.blacklist (blocked_user_id) WHERE removed_at IS NULL;
