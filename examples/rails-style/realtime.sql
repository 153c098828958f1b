-- What the adopter adds beside the app's tables (one migration of the app, after the outbox's:
-- `REALTIME_KEY_TYPE=bigint realtime-dispatch migrate --only outbox`). See docs/adopting.md.

-- Read receipts: participations' key is composite, so the row gets a surrogate for ref_id
-- (adopting.md, "Composite keys").
ALTER TABLE participations ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY UNIQUE;

-- Conversations are hard-deleted: a tombstone tells deleted_chats which ones (a row of a
-- deleted conversation is TargetGone; a chat id that never existed is quarantined).
CREATE TABLE realtime_chat_tombstones (
    chat_id    bigint      PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
CREATE FUNCTION realtime_chat_tombstone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO realtime_chat_tombstones (chat_id) VALUES (OLD.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER conversations_tombstone AFTER DELETE ON conversations
    FOR EACH ROW EXECUTE FUNCTION realtime_chat_tombstone();

-- Membership spans for GET /api/sync on a boolean flag: set by the database when `removed`
-- flips (its now(), the clock of the outbox's created_at), never by updated_at, which moves
-- with every update and is the app server's clock. A rejoin starts a new span.
ALTER TABLE participations
    ADD COLUMN realtime_joined_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN realtime_left_at   timestamptz;
CREATE FUNCTION realtime_participation_span() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.removed AND NOT OLD.removed THEN
        NEW.realtime_left_at := now();
    ELSIF OLD.removed AND NOT NEW.removed THEN
        NEW.realtime_joined_at := now();
        NEW.realtime_left_at := NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER participations_realtime_span BEFORE UPDATE OF removed ON participations
    FOR EACH ROW EXECUTE FUNCTION realtime_participation_span();

-- Membership hints to every hub (adopting.md, "Membership"): only when `removed` changes, not
-- on a read mark; the hub reads member_chats again.
CREATE FUNCTION realtime_notify_membership() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('realtime_membership', json_build_object(
            'chatId', OLD.conversation_id, 'userId', OLD.account_id)::text);
    ELSIF TG_OP = 'INSERT' OR NEW.removed IS DISTINCT FROM OLD.removed THEN
        PERFORM pg_notify('realtime_membership', json_build_object(
            'chatId', NEW.conversation_id, 'userId', NEW.account_id)::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER participations_realtime
    AFTER INSERT OR UPDATE OR DELETE ON participations
    FOR EACH ROW EXECUTE FUNCTION realtime_notify_membership();
