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
