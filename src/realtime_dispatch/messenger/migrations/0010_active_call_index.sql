-- What the call-timeout reaper scans for calls that outlived REALTIME_CALL_MAX_DURATION: only
-- the (few) live answered calls.
CREATE INDEX IF NOT EXISTS ix_call_sessions_active
    ON messenger.call_sessions (answered_at) WHERE status = 'Active';
