-- The media lifecycle jobs beside the dispatcher (the conference-room reaper, the recording-
-- finalize retry).

-- The finalize retry's schedule of a Stopped recording: asks made so far, and when the next is
-- due (NULL: never asked, due from the stop). Set by the job's claim, like the outbox's
-- attempts / next_attempt_at.
ALTER TABLE messenger.call_recordings
    ADD COLUMN finalize_attempts integer     NOT NULL DEFAULT 0,
    ADD COLUMN finalize_next_at  timestamptz NULL,
    ADD CONSTRAINT ck_call_recordings_finalize_attempts CHECK (finalize_attempts >= 0);
-- What the finalize retry claims: only the (few) Stopped recordings, in due order.
CREATE INDEX ix_call_recordings_finalize_due
    ON messenger.call_recordings ((coalesce(finalize_next_at, stopped_at)))
    WHERE status = 'Stopped';
-- Same, without a status service: the Stopped recordings by stop time.
CREATE INDEX ix_call_recordings_stopped
    ON messenger.call_recordings (stopped_at) WHERE status = 'Stopped';

-- What the conference-room reaper scans: only the live conferences, oldest first.
CREATE INDEX ix_conference_sessions_live
    ON messenger.conference_sessions (started_at) WHERE status = 'Active';
