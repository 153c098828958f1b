-- A deleted chat leaves a tombstone, so the dispatcher can tell a row of a deleted chat (its
-- entity went with the chat: nothing to deliver, Done as TargetGone) from a row whose chat id
-- never existed (a writer's defect: quarantined). The shipped manifest's chat_alive reads it.
CREATE TABLE messenger.chat_tombstones (
    chat_id    uuid        PRIMARY KEY,
    deleted_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION messenger.chat_tombstone() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO messenger.chat_tombstones (chat_id) VALUES (OLD.id) ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER trg_chats_tombstone
    AFTER DELETE ON messenger.chats
    FOR EACH ROW EXECUTE FUNCTION messenger.chat_tombstone();
