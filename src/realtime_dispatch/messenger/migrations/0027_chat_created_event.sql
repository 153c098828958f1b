-- A chat's creation is a chat event too: 'ChatCreated' (actor: the creator), pushed to the first
-- members as chat_updated in the creating transaction, so their clients list the chat at once.
ALTER TABLE messenger.chat_events DROP CONSTRAINT ck_chat_events_kind;
ALTER TABLE messenger.chat_events ADD CONSTRAINT ck_chat_events_kind CHECK (
    event_kind IN ('ChatCreated', 'MemberAdded', 'MemberRemoved', 'MemberLeft', 'TitleChanged'));
