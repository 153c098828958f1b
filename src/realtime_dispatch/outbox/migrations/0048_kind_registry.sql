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
@builtin_kinds@
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
