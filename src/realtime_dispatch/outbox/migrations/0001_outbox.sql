-- The realtime outbox: one row per push intent, written in the owner's transaction. The owner's
-- keys (chat_id, target_user_id, message_id, ref_id) take REALTIME_KEY_TYPE's type (the placeholder is
-- replaced when the migration is applied or printed); the row's own id is always a UUIDv7.
CREATE SCHEMA IF NOT EXISTS messenger;

CREATE TABLE messenger.realtime_outbox (
    id              uuid         PRIMARY KEY,
    kind            varchar(32)  NOT NULL,
    target_kind     varchar(16)  NOT NULL,
    chat_id         @key_type@   NULL,
    target_user_id  @key_type@   NULL,
    message_id      @key_type@   NULL,
    ref_id          @key_type@   NULL,
    session_kind    varchar(12)  NULL,
    seq             bigint       NULL,
    status          varchar(16)  NOT NULL DEFAULT 'Pending',
    attempts        integer      NOT NULL DEFAULT 0,
    next_attempt_at timestamptz  NOT NULL DEFAULT now(),
    last_error      varchar(512) NULL,
    created_at      timestamptz  NOT NULL DEFAULT now(),
    updated_at      timestamptz  NOT NULL DEFAULT now(),
    row_version     integer      NOT NULL DEFAULT 0,
    CONSTRAINT ck_rto_kind CHECK (kind IN (
        'MessageReceived', 'MessageEdited', 'MessageDeleted', 'ReadReceiptUpdated', 'ChatUpdated',
        'ContactRequestReceived', 'ContactRequestAccepted', 'ContactRemoved',
        'CallInvited', 'CallAnswered', 'CallDeclined', 'CallMissed', 'CallCancelled', 'CallEnded',
        'ConferenceInvited', 'ConferenceStarted', 'ConferenceEnded',
        'ConferenceParticipantJoined', 'ConferenceParticipantLeft',
        'RecordingStarted', 'RecordingStopped', 'RecordingAvailable', 'RecordingFailed',
        'ScreenShareStarted', 'ScreenShareStopped', 'BlacklistChanged')),
    CONSTRAINT ck_rto_target_kind CHECK (target_kind IN ('ChatGroup', 'User')),
    CONSTRAINT ck_rto_status CHECK (status IN ('Pending', 'Done', 'Quarantined')),
    CONSTRAINT ck_rto_session_kind CHECK (session_kind IS NULL OR session_kind IN ('Direct', 'Conference')),
    CONSTRAINT ck_rto_attempts CHECK (attempts >= 0),
    CONSTRAINT ck_rto_target_id CHECK (
        (target_kind = 'ChatGroup' AND chat_id IS NOT NULL)
        OR (target_kind = 'User' AND target_user_id IS NOT NULL))
) WITH (fillfactor = 80);

-- The spec's indexes.
CREATE INDEX ix_rto_due ON messenger.realtime_outbox (status, next_attempt_at);
CREATE INDEX ix_rto_chat ON messenger.realtime_outbox (chat_id);
-- What the claim's ORDER BY id needs: only Pending rows, in insertion (UUIDv7) order, so the
-- claim never walks past Done rows (see docs/explanation.md, "Claim query and indexes").
CREATE INDEX ix_rto_pending_id ON messenger.realtime_outbox (id) WHERE status = 'Pending';

-- One row: is the dispatcher idle (asleep on LISTEN)? Owners notify only then, because a
-- transaction that sends NOTIFY serialises on a global lock through its commit.
CREATE TABLE messenger.realtime_dispatch_state (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    idle       boolean     NOT NULL DEFAULT true,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO messenger.realtime_dispatch_state DEFAULT VALUES;

-- Wake the dispatcher on any insert, from any writer in any language. The shared advisory lock,
-- held to commit, lets the dispatcher wait out in-flight writers when it goes idle, so a row
-- committed around that moment is either seen by its re-check or notified: no lost wake-up.
CREATE FUNCTION messenger.realtime_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('realtime_outbox:wake', 0));
    IF EXISTS (SELECT 1 FROM messenger.realtime_dispatch_state WHERE idle) THEN
        PERFORM pg_notify('realtime_outbox', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER trg_rto_notify
    AFTER INSERT ON messenger.realtime_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION messenger.realtime_outbox_notify();
