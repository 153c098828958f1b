-- The blacklist in chats. A blocked user cannot post, edit, add members, rename, or start, join
-- or invite to a conference in a chat that has been a chat of just the two of them (blocker and
-- blocked, the only active members) at any moment since the block was placed, while the blocker
-- is an active member of it. Adding members afterwards does not lift it: the chat stays marked.
-- One row per (block, chat), written by the triggers below whenever a chat has exactly two
-- active members with an active block between them, whichever change made it so: the block
-- placed while it is so, or the membership change (a chat created for the two, a third member
-- leaving) that makes it so. A new block (after an unblock) starts with no marks of its own.
CREATE TABLE messenger.blacklist_chats (
    chat_id      uuid        NOT NULL REFERENCES messenger.chats (id) ON DELETE CASCADE,
    blacklist_id uuid        NOT NULL REFERENCES messenger.blacklist (id) ON DELETE CASCADE,
    marked_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, blacklist_id)
);
CREATE INDEX ix_blacklist_chats_blacklist ON messenger.blacklist_chats (blacklist_id);

-- Mark the chat for every active block between its two active members, if it has two.
CREATE FUNCTION messenger.mark_blocked_pair_chat(p_chat uuid) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO messenger.blacklist_chats (chat_id, blacklist_id)
    SELECT p_chat, b.id
    FROM (SELECT array_agg(user_id) AS users FROM messenger.participants
          WHERE chat_id = p_chat AND active HAVING count(*) = 2) AS pair
    JOIN messenger.blacklist AS b
      ON b.removed_at IS NULL
     AND b.owner_user_id = ANY (pair.users) AND b.blocked_user_id = ANY (pair.users)
    ON CONFLICT DO NOTHING
$$;

CREATE FUNCTION messenger.mark_on_membership() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM messenger.mark_blocked_pair_chat(NEW.chat_id);
    RETURN NULL;
END
$$;

CREATE TRIGGER trg_participants_mark_blocked_pair
    AFTER INSERT OR UPDATE OF active ON messenger.participants
    FOR EACH ROW EXECUTE FUNCTION messenger.mark_on_membership();

-- The chats that are a chat of just these two right now.
CREATE FUNCTION messenger.mark_block_chats(p_block uuid) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO messenger.blacklist_chats (chat_id, blacklist_id)
    SELECT p.chat_id, b.id
    FROM messenger.blacklist AS b
    JOIN messenger.participants AS p ON p.user_id = b.owner_user_id AND p.active
    JOIN messenger.participants AS q
      ON q.chat_id = p.chat_id AND q.user_id = b.blocked_user_id AND q.active
    WHERE b.id = p_block AND b.removed_at IS NULL
      AND (SELECT count(*) FROM messenger.participants AS o
           WHERE o.chat_id = p.chat_id AND o.active) = 2
    ON CONFLICT DO NOTHING
$$;

CREATE FUNCTION messenger.mark_on_block() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM messenger.mark_block_chats(NEW.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER trg_blacklist_mark_chats
    AFTER INSERT ON messenger.blacklist
    FOR EACH ROW EXECUTE FUNCTION messenger.mark_on_block();

-- The blocks in place before this migration, for the chats that are two-person now.
SELECT messenger.mark_block_chats(id) FROM messenger.blacklist WHERE removed_at IS NULL;
