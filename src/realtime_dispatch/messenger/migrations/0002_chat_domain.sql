-- The minimal chat domain the message payload builders read. Each message has a per-chat seq,
-- allocated from chats.last_seq under the chat row's lock (gap-free under concurrent senders).
CREATE TABLE messenger.chats (
    id          uuid         PRIMARY KEY,
    title       varchar(200) NOT NULL,
    created_by  uuid         NOT NULL,
    last_seq    bigint       NOT NULL DEFAULT 0,
    created_at  timestamptz  NOT NULL DEFAULT now()
);

CREATE TABLE messenger.participants (
    id            uuid        PRIMARY KEY,
    chat_id       uuid        NOT NULL REFERENCES messenger.chats (id) ON DELETE CASCADE,
    user_id       uuid        NOT NULL,
    active        boolean     NOT NULL DEFAULT true,
    last_read_seq bigint      NOT NULL DEFAULT 0,
    joined_at     timestamptz NOT NULL DEFAULT now(),
    left_at       timestamptz NULL,
    CONSTRAINT uq_participants_chat_user UNIQUE (chat_id, user_id)
);
CREATE INDEX ix_participants_user_active ON messenger.participants (user_id) WHERE active;

CREATE TABLE messenger.messages (
    id              uuid        PRIMARY KEY,
    chat_id         uuid        NOT NULL REFERENCES messenger.chats (id) ON DELETE CASCADE,
    seq             bigint      NOT NULL,
    sender_user_id  uuid        NULL,
    kind            varchar(16) NOT NULL DEFAULT 'Text',
    body            text        NULL,
    file_meta       jsonb       NULL,
    card_text       text        NULL,
    sent_at         timestamptz NOT NULL DEFAULT now(),
    edited_at       timestamptz NULL,
    deleted_at      timestamptz NULL,
    CONSTRAINT uq_messages_chat_seq UNIQUE (chat_id, seq),
    CONSTRAINT ck_messages_kind CHECK (kind IN ('Text', 'File', 'Card', 'System'))
);
