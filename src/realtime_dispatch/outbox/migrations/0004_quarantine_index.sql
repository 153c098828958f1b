-- Operators list quarantined rows newest first (`realtime-dispatch quarantined`, /ops). They are
-- few and rarely change, so a partial index costs nothing on the hot path and spares the listing
-- a walk past every Done row.
CREATE INDEX ix_rto_quarantined_id ON messenger.realtime_outbox (id) WHERE status = 'Quarantined';
