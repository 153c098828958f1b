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
