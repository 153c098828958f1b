-- The media domain: 1:1 call sessions, conferences of a chat and their roster, recordings and
-- screen shares of either. Only room names are stored; join tokens and TURN credentials are
-- minted by the dispatcher at delivery and never written anywhere.

CREATE TABLE messenger.call_sessions (
    id               uuid        PRIMARY KEY,
    caller_user_id   uuid        NOT NULL,
    callee_user_id   uuid        NOT NULL,
    room_name        varchar(64) NOT NULL,
    status           varchar(12) NOT NULL DEFAULT 'Ringing',
    created_at       timestamptz NOT NULL DEFAULT now(),
    answered_at      timestamptz NULL,
    ended_at         timestamptz NULL,
    ended_by_user_id uuid        NULL,
    CONSTRAINT uq_call_sessions_room UNIQUE (room_name),
    CONSTRAINT ck_call_sessions_status CHECK (
        status IN ('Ringing', 'Active', 'Declined', 'Missed', 'Cancelled', 'Ended')),
    CONSTRAINT ck_call_sessions_distinct CHECK (caller_user_id <> callee_user_id)
);
-- What the call-timeout reaper scans.
CREATE INDEX ix_call_sessions_ringing ON messenger.call_sessions (created_at)
    WHERE status = 'Ringing';

CREATE TABLE messenger.conference_sessions (
    id                 uuid        PRIMARY KEY,
    chat_id            uuid        NOT NULL REFERENCES messenger.chats (id) ON DELETE CASCADE,
    started_by_user_id uuid        NOT NULL,
    room_name          varchar(64) NOT NULL,
    status             varchar(12) NOT NULL DEFAULT 'Active',
    started_at         timestamptz NOT NULL DEFAULT now(),
    ended_at           timestamptz NULL,
    ended_by_user_id   uuid        NULL,
    CONSTRAINT uq_conference_sessions_room UNIQUE (room_name),
    CONSTRAINT ck_conference_sessions_status CHECK (status IN ('Active', 'Ended'))
);
-- One live conference per chat.
CREATE UNIQUE INDEX uq_conference_sessions_active
    ON messenger.conference_sessions (chat_id) WHERE status = 'Active';

-- The roster: one row per user and conference (invited, joined, left; rejoining reuses it).
CREATE TABLE messenger.conference_participants (
    id                 uuid        PRIMARY KEY,
    conference_id      uuid        NOT NULL
                                   REFERENCES messenger.conference_sessions (id) ON DELETE CASCADE,
    user_id            uuid        NOT NULL,
    status             varchar(12) NOT NULL,
    invited_by_user_id uuid        NULL,
    invited_at         timestamptz NULL,
    joined_at          timestamptz NULL,
    left_at            timestamptz NULL,
    CONSTRAINT uq_conference_participants UNIQUE (conference_id, user_id),
    CONSTRAINT ck_conference_participants_status CHECK (status IN ('Invited', 'Joined', 'Left'))
);

-- A recording of a 1:1 call (Direct) or of a conference (Conference).
CREATE TABLE messenger.call_recordings (
    id                 uuid        PRIMARY KEY,
    session_kind       varchar(12) NOT NULL,
    call_id            uuid        NULL REFERENCES messenger.call_sessions (id) ON DELETE CASCADE,
    conference_id      uuid        NULL
                                   REFERENCES messenger.conference_sessions (id) ON DELETE CASCADE,
    started_by_user_id uuid        NOT NULL,
    status             varchar(12) NOT NULL DEFAULT 'Recording',
    started_at         timestamptz NOT NULL DEFAULT now(),
    stopped_at         timestamptz NULL,
    available_at       timestamptz NULL,
    failed_at          timestamptz NULL,
    failure_code       varchar(64) NULL,
    CONSTRAINT ck_call_recordings_status CHECK (
        status IN ('Recording', 'Stopped', 'Available', 'Failed')),
    CONSTRAINT ck_call_recordings_session CHECK (
        (session_kind = 'Direct' AND call_id IS NOT NULL AND conference_id IS NULL)
        OR (session_kind = 'Conference' AND conference_id IS NOT NULL AND call_id IS NULL))
);
CREATE UNIQUE INDEX uq_call_recordings_call_active
    ON messenger.call_recordings (call_id) WHERE status = 'Recording';
CREATE UNIQUE INDEX uq_call_recordings_conference_active
    ON messenger.call_recordings (conference_id) WHERE status = 'Recording';

-- A screen share in a 1:1 call or a conference; one live share per session.
CREATE TABLE messenger.screen_shares (
    id            uuid        PRIMARY KEY,
    session_kind  varchar(12) NOT NULL,
    call_id       uuid        NULL REFERENCES messenger.call_sessions (id) ON DELETE CASCADE,
    conference_id uuid        NULL
                              REFERENCES messenger.conference_sessions (id) ON DELETE CASCADE,
    user_id       uuid        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    stopped_at    timestamptz NULL,
    CONSTRAINT ck_screen_shares_session CHECK (
        (session_kind = 'Direct' AND call_id IS NOT NULL AND conference_id IS NULL)
        OR (session_kind = 'Conference' AND conference_id IS NOT NULL AND call_id IS NULL))
);
CREATE UNIQUE INDEX uq_screen_shares_call_active
    ON messenger.screen_shares (call_id) WHERE stopped_at IS NULL;
CREATE UNIQUE INDEX uq_screen_shares_conference_active
    ON messenger.screen_shares (conference_id) WHERE stopped_at IS NULL;
