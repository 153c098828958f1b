-- Whether a chat-wide push of the chat's conference may carry join credentials: not where the
-- blacklist holds (messenger/access.py): an active member blocked by another active member, in a
-- chat that is, or has been since the block, a chat of just the two of them. Read by the
-- reference manifest's conference queries (column media_withheld).
CREATE FUNCTION messenger.media_withheld(chat uuid) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM messenger.blacklist b
        JOIN messenger.participants o
          ON o.chat_id = chat AND o.user_id = b.owner_user_id AND o.active
        JOIN messenger.participants t
          ON t.chat_id = chat AND t.user_id = b.blocked_user_id AND t.active
        WHERE b.removed_at IS NULL
          AND (EXISTS (SELECT 1 FROM messenger.blacklist_chats m
                       WHERE m.chat_id = chat AND m.blacklist_id = b.id)
               OR (SELECT count(*) FROM messenger.participants a
                   WHERE a.chat_id = chat AND a.active) = 2))
$$;
