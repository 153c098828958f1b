-- realtime-dispatch schema: 9 migrations

CREATE SCHEMA IF NOT EXISTS messenger;
CREATE TABLE IF NOT EXISTS messenger.realtime_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- migration 0001_outbox
-- The realtime outbox: one row per push intent, written in the owner's transaction. The owner's
-- keys (chat_id, target_user_id, message_id, ref_id) take REALTIME_KEY_TYPE's type (the placeholder is
-- replaced when the migration is applied or printed); the row's own id is always a UUIDv7.
CREATE SCHEMA IF NOT EXISTS messenger;

CREATE TABLE messenger.realtime_outbox (
    id              uuid         PRIMARY KEY,
    kind            varchar(32)  NOT NULL,
    target_kind     varchar(16)  NOT NULL,
    chat_id         bigint   NULL,
    target_user_id  bigint   NULL,
    message_id      bigint   NULL,
    ref_id          bigint   NULL,
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
INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES (1, 'outbox');

-- migration 0003_wake_without_waiting
-- Owners never queue behind the dispatcher going idle.
--
-- Going idle, the dispatcher takes the wake lock exclusively (wait_writers) so that its re-check
-- sees every row whose writer decided not to notify. With 0001's trigger, a writer that reached
-- its INSERT while that exclusive request was waiting queued behind it (PostgreSQL grants locks
-- in order): at each idle transition every owner stalled until the in-flight ones committed,
-- and owners lost about a fifth of their commit rate at 2,000 commits/s.
--
-- Now a writer that cannot take the shared lock at once (the dispatcher holds or awaits it, so
-- it is about to sleep) simply notifies: its commit wakes the dispatcher, so no wake-up is lost
-- either way. A writer that gets the shared lock behaves as before.
CREATE OR REPLACE FUNCTION messenger.realtime_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock_shared(hashtextextended('realtime_outbox:wake', 0)) THEN
        PERFORM pg_notify('realtime_outbox', '');  -- the dispatcher is going idle
    ELSIF EXISTS (SELECT 1 FROM messenger.realtime_dispatch_state WHERE idle) THEN
        PERFORM pg_notify('realtime_outbox', '');
    END IF;
    RETURN NULL;
END
$$;
INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES (3, 'wake_without_waiting');

-- migration 0004_quarantine_index
-- Operators list quarantined rows newest first (`realtime-dispatch quarantined`, /ops). They are
-- few and rarely change, so a partial index costs nothing on the hot path and spares the listing
-- a walk past every Done row.
CREATE INDEX ix_rto_quarantined_id ON messenger.realtime_outbox (id) WHERE status = 'Quarantined';
INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES (4, 'quarantine_index');

-- migration 0007_sql_ids
-- A UUIDv7 made by the server at the moment it is called (RFC 9562: 48-bit Unix milliseconds,
-- version 7, then the sub-millisecond fraction in the 12 bits of rand_a for finer ordering,
-- then the variant and 62 random bits).
--
-- The dispatcher claims in id order, which must follow commit order within a chat. An id made
-- by the client before its statement waits for the chat row lock can sort before the id of the
-- sender who held that lock; an id made here, after the lock is granted, cannot.
-- (PL/pgSQL, not SQL: the clock is read once, and the call costs half as much.)
CREATE FUNCTION messenger.realtime_new_id() RETURNS uuid
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
DECLARE
    us bigint := floor(extract(epoch FROM clock_timestamp()) * 1000000);
BEGIN
    RETURN encode(
        substring(int8send(us / 1000) FROM 3)
        || int2send((28672 + (us % 1000) * 4096 / 1000)::int2)
        || substring(uuid_send(gen_random_uuid()) FROM 9),
        'hex')::uuid;
END
$$;
INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES (7, 'sql_ids');

-- migration 0012_dispatch_partitions
-- Partitioned dispatch (REALTIME_DISPATCH_PARTITIONS): a row's partition, and one idle flag per
-- partition, so that owners notify while any partition's runner sleeps (the trigger already
-- notifies when any flag is set). Partition 0 of 1 keeps the former single flag.

-- hash(chat, else target user) mod N; IMMUTABLE and plain SQL, so the planner inlines it.
CREATE FUNCTION messenger.realtime_partition(chat_id bigint, target_user_id bigint,
                                               partitions int)
RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ((hashtextextended(coalesce(chat_id, target_user_id)::text, 0) % partitions
             + partitions) % partitions)::int
$$;

ALTER TABLE messenger.realtime_dispatch_state
    ADD COLUMN partitions int NOT NULL DEFAULT 1,
    ADD COLUMN partition_index int NOT NULL DEFAULT 0;
ALTER TABLE messenger.realtime_dispatch_state DROP CONSTRAINT realtime_dispatch_state_pkey;
ALTER TABLE messenger.realtime_dispatch_state DROP COLUMN singleton;
ALTER TABLE messenger.realtime_dispatch_state
    ADD PRIMARY KEY (partitions, partition_index),
    ADD CONSTRAINT ck_realtime_dispatch_state_partition
        CHECK (partitions >= 1 AND partition_index >= 0 AND partition_index < partitions);
INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES (12, 'dispatch_partitions');

-- migration 0014_id_default
-- Ids the database can trust. The claim takes rows in id order and retention deletes Done rows
-- below a time-derived id, so both rely on the id being a UUIDv7 of about the row's creation
-- time. A writer may now leave the id out (the database makes it, after any lock its
-- statement waited for: the order of commits within a chat); an id given that is not a UUIDv7
-- (version 7, RFC 9562 variant) is refused. NOT VALID: rows written before stay as they are.
ALTER TABLE messenger.realtime_outbox ALTER COLUMN id SET DEFAULT messenger.realtime_new_id();
ALTER TABLE messenger.realtime_outbox ADD CONSTRAINT ck_rto_id_uuid7 CHECK (
    substr(id::text, 15, 1) = '7' AND substr(id::text, 20, 1) IN ('8', '9', 'a', 'b')
) NOT VALID;
INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES (14, 'id_default');

-- migration 0023_sync_cursor
-- GET /api/sync reads the outbox as an offset log (realtime_dispatch.sync).
--
-- Ids are taken before commit, so id order is not commit order. Every row records the
-- transaction that wrote it (xid8, assigned on the first write, never reused); a reader takes
-- only rows whose transaction is below the snapshot's xmin horizon, where every transaction
-- has ended, so a row it has not yet seen can only appear at or above the horizon: a cursor
-- (xid, id) never skips a row committed later. Any writer, in any language, gets the default.
ALTER TABLE messenger.realtime_outbox
    ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX ix_rto_sync ON messenger.realtime_outbox (xid, id);

-- How far deletions (retention, purge, an operator's DELETE or TRUNCATE) have reached: a
-- cursor at or below it may have missed deleted rows, and sync answers limited: true.
CREATE TABLE messenger.realtime_sync_floor (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    deleted_through xid8    NULL
);
INSERT INTO messenger.realtime_sync_floor DEFAULT VALUES;

CREATE FUNCTION messenger.realtime_sync_floor_raise() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messenger.realtime_sync_floor
    SET deleted_through = greatest(deleted_through, (SELECT max(xid) FROM gone))
    WHERE EXISTS (SELECT 1 FROM gone);
    RETURN NULL;
END
$$;

CREATE TRIGGER trg_rto_sync_floor
    AFTER DELETE ON messenger.realtime_outbox
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION messenger.realtime_sync_floor_raise();

CREATE FUNCTION messenger.realtime_sync_floor_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messenger.realtime_sync_floor
    SET deleted_through = pg_snapshot_xmax(pg_current_snapshot());
    RETURN NULL;
END
$$;

CREATE TRIGGER trg_rto_sync_floor_truncate
    AFTER TRUNCATE ON messenger.realtime_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION messenger.realtime_sync_floor_truncated();
INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES (23, 'sync_cursor');

-- migration 0024_revocations
-- Revoked users (realtime-dispatch revoke --user): tokens issued before revoked_at are refused on
-- the hub and REST, and the user's live connections are closed. Every change is announced on
-- NOTIFY realtime_revocation ({"userId", "revokedAt": Unix seconds | null when lifted}), so every
-- hub replica applies it, whoever wrote the row.

CREATE TABLE messenger.realtime_revocations (
    user_id    bigint  PRIMARY KEY,
    revoked_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION messenger.realtime_revocation_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('realtime_revocation',
            json_build_object('userId', OLD.user_id, 'revokedAt', NULL)::text);
        RETURN OLD;
    END IF;
    PERFORM pg_notify('realtime_revocation',
        json_build_object('userId', NEW.user_id,
                          'revokedAt', extract(epoch FROM NEW.revoked_at))::text);
    RETURN NEW;
END
$$;

CREATE TRIGGER trg_realtime_revocation_notify
AFTER INSERT OR UPDATE OR DELETE ON messenger.realtime_revocations
FOR EACH ROW EXECUTE FUNCTION messenger.realtime_revocation_notify();
INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES (24, 'revocations');

-- migration 0048_kind_registry
-- The kinds the outbox accepts, in a table: the built-in kinds (written here, and again by every
-- process that starts, from the package's catalogue) and the kinds an app declares in its manifest
-- (registered when migrate, check, worker, hub or serve starts with it). A row of a kind that is
-- not registered fails in the writer's transaction, as ck_rto_kind's list did; a declared kind's
-- row must also have its declared target (a chat kind goes to a ChatGroup, a user kind to a User).
CREATE TABLE messenger.realtime_kinds (
    kind          varchar(32) PRIMARY KEY,
    target_kind   varchar(16) NULL,   -- NULL: decided per row (the built-in media kinds)
    event         varchar(64) NOT NULL,
    builtin       boolean     NOT NULL DEFAULT false,
    registered_at timestamptz NOT NULL DEFAULT now(),
    declared_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_realtime_kinds_target CHECK (target_kind IS NULL OR target_kind IN ('ChatGroup', 'User'))
);

INSERT INTO messenger.realtime_kinds (kind, target_kind, event, builtin) VALUES
    ('MessageReceived', 'ChatGroup', 'message_received', true),
    ('MessageEdited', 'ChatGroup', 'message_edited', true),
    ('MessageDeleted', 'ChatGroup', 'message_deleted', true),
    ('ReadReceiptUpdated', 'ChatGroup', 'read_receipt_updated', true),
    ('ChatUpdated', 'ChatGroup', 'chat_updated', true),
    ('ContactRequestReceived', 'User', 'contact_request_received', true),
    ('ContactRequestAccepted', 'User', 'contact_request_accepted', true),
    ('ContactRemoved', 'User', 'contact_removed', true),
    ('CallInvited', NULL, 'call_invited', true),
    ('CallAnswered', NULL, 'call_answered', true),
    ('CallDeclined', NULL, 'call_declined', true),
    ('CallMissed', NULL, 'call_missed', true),
    ('CallCancelled', NULL, 'call_cancelled', true),
    ('CallEnded', NULL, 'call_ended', true),
    ('ConferenceInvited', NULL, 'conference_invited', true),
    ('ConferenceStarted', NULL, 'conference_started', true),
    ('ConferenceEnded', NULL, 'conference_ended', true),
    ('ConferenceParticipantJoined', NULL, 'conference_participant_joined', true),
    ('ConferenceParticipantLeft', NULL, 'conference_participant_left', true),
    ('RecordingStarted', NULL, 'recording_started', true),
    ('RecordingStopped', NULL, 'recording_stopped', true),
    ('RecordingAvailable', NULL, 'recording_available', true),
    ('RecordingFailed', NULL, 'recording_failed', true),
    ('ScreenShareStarted', NULL, 'screen_share_started', true),
    ('ScreenShareStopped', NULL, 'screen_share_stopped', true),
    ('BlacklistChanged', 'User', 'blacklist_changed', true)
ON CONFLICT (kind) DO NOTHING;

CREATE FUNCTION messenger.realtime_outbox_kind_check() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    declared varchar(16);
BEGIN
    SELECT k.target_kind INTO declared FROM messenger.realtime_kinds k WHERE k.kind = NEW.kind;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'realtime_outbox: kind "%" is not registered (a built-in kind, or one of the manifest''s -- kind: blocks)', NEW.kind
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ck_rto_kind',
                  SCHEMA = 'messenger', TABLE = 'realtime_outbox', COLUMN = 'kind';
    END IF;
    IF declared IS NOT NULL AND declared IS DISTINCT FROM NEW.target_kind THEN
        RAISE EXCEPTION 'realtime_outbox: kind "%" goes to a %, not a %', NEW.kind, declared, NEW.target_kind
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ck_rto_target_kind',
                  SCHEMA = 'messenger', TABLE = 'realtime_outbox', COLUMN = 'target_kind';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER trg_rto_kind
    BEFORE INSERT OR UPDATE OF kind, target_kind ON messenger.realtime_outbox
    FOR EACH ROW EXECUTE FUNCTION messenger.realtime_outbox_kind_check();

-- The list moves to the table; the constraint keeps its name and checks the shape of a kind.
ALTER TABLE messenger.realtime_outbox DROP CONSTRAINT ck_rto_kind;
ALTER TABLE messenger.realtime_outbox
    ADD CONSTRAINT ck_rto_kind CHECK (kind ~ '^[A-Z][A-Za-z0-9]{0,31}$') NOT VALID;
ALTER TABLE messenger.realtime_outbox VALIDATE CONSTRAINT ck_rto_kind;
INSERT INTO messenger.realtime_schema_migrations (version, name) VALUES (48, 'kind_registry');
