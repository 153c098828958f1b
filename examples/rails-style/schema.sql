-- The app's own tables, as Rails (or Laravel) migrations make them: plural snake_case tables,
-- bigint ids, boolean flags instead of timestamps, `timestamp without time zone` columns in UTC,
-- a composite primary key on participations, conversations hard-deleted (the cascade takes
-- their notes and participations).
CREATE TABLE accounts (
    id bigserial PRIMARY KEY,
    email text NOT NULL UNIQUE,
    created_at timestamp(6) NOT NULL DEFAULT now(),
    updated_at timestamp(6) NOT NULL DEFAULT now()
);
CREATE TABLE conversations (
    id bigserial PRIMARY KEY,
    subject text NOT NULL,
    notes_count integer NOT NULL DEFAULT 0,
    created_at timestamp(6) NOT NULL DEFAULT now(),
    updated_at timestamp(6) NOT NULL DEFAULT now()
);
CREATE TABLE participations (
    conversation_id bigint NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    account_id bigint NOT NULL REFERENCES accounts(id),
    removed boolean NOT NULL DEFAULT false,
    last_read_position integer NOT NULL DEFAULT 0,
    last_read_at timestamp(6),
    created_at timestamp(6) NOT NULL DEFAULT now(),
    updated_at timestamp(6) NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, account_id)
);
CREATE INDEX index_participations_on_account_id ON participations(account_id);
CREATE TABLE notes (
    id bigserial PRIMARY KEY,
    conversation_id bigint NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position integer NOT NULL,
    account_id bigint REFERENCES accounts(id),
    content text NOT NULL,
    removed boolean NOT NULL DEFAULT false,
    created_at timestamp(6) NOT NULL DEFAULT now(),
    updated_at timestamp(6) NOT NULL DEFAULT now(),
    UNIQUE (conversation_id, position)
);
