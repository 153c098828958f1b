-- Revoked users (realtime-dispatch revoke --user): tokens issued before revoked_at are refused on
-- the hub and REST, and the user's live connections are closed. Every change is announced on
-- NOTIFY realtime_revocation ({"userId", "revokedAt": Unix seconds | null when lifted}), so every
-- hub replica applies it, whoever wrote the row.

CREATE TABLE messenger.realtime_revocations (
    user_id    @key_type@  PRIMARY KEY,
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
