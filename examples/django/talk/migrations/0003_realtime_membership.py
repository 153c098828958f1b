"""Membership to the hubs, whoever writes ``talk_member`` (the ORM, a data fix in psql): the
trigger notifies inside the membership's transaction, so the hubs hear of it exactly when it
commits. The notification is a hint, ``{"chatId": 17, "userId": 42}`` without ``active``: each
hub with a connection of that user reads their rooms again (``member_chats`` in
projections.sql). A user may have several rows per room (a rejoin is a new row), so the row
that fired cannot say whether the user is a member; the query can."""

from django.db import migrations

TRIGGER = """
CREATE FUNCTION talk_member_realtime() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('realtime_membership', json_build_object(
            'chatId', OLD.room_id, 'userId', OLD.user_id)::text);
    ELSIF TG_OP = 'INSERT' OR NEW.left_at IS DISTINCT FROM OLD.left_at THEN
        PERFORM pg_notify('realtime_membership', json_build_object(
            'chatId', NEW.room_id, 'userId', NEW.user_id)::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER talk_member_realtime
    AFTER INSERT OR UPDATE OR DELETE ON talk_member
    FOR EACH ROW EXECUTE FUNCTION talk_member_realtime();
"""

UNDO = """
DROP TRIGGER talk_member_realtime ON talk_member;
DROP FUNCTION talk_member_realtime();
"""


class Migration(migrations.Migration):
    dependencies = [("talk", "0002_realtime_outbox")]

    operations = [migrations.RunSQL([TRIGGER], reverse_sql=[UNDO])]
