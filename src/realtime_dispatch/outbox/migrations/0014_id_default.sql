-- Ids the database can trust. The claim takes rows in id order and retention deletes Done rows
-- below a time-derived id, so both rely on the id being a UUIDv7 of about the row's creation
-- time. A writer may now leave the id out (the database makes it, after any lock its
-- statement waited for: the order of commits within a chat); an id given that is not a UUIDv7
-- (version 7, RFC 9562 variant) is refused. NOT VALID: rows written before stay as they are.
ALTER TABLE messenger.realtime_outbox ALTER COLUMN id SET DEFAULT messenger.realtime_new_id();
ALTER TABLE messenger.realtime_outbox ADD CONSTRAINT ck_rto_id_uuid7 CHECK (
    substr(id::text, 15, 1) = '7' AND substr(id::text, 20, 1) IN ('8', '9', 'a', 'b')
) NOT VALID;
