"""The talk app's tables: rooms, their members (soft deleted: a rejoin inserts a new row), posts
numbered per room, and the realtime outbox (created by realtime-dispatch's SQL, migration 0002;
mapped here, unmanaged, to be written in the same transaction as the change it announces)."""

from django.conf import settings
from django.db import models


class TransactionNow(models.Func):
    """PostgreSQL's ``now()``: the transaction's start, the clock the outbox's ``created_at``
    uses. (Django's ``Now()`` is ``STATEMENT_TIMESTAMP()``, later within a transaction: a
    membership span read by ``GET /api/sync`` must compare to ``created_at`` on one clock.)"""

    template = "now()"
    output_field = models.DateTimeField()


class Room(models.Model):
    title = models.CharField(max_length=200)
    last_number = models.BigIntegerField(default=0)  # the last post's number
    created_at = models.DateTimeField(db_default=TransactionNow())
    deleted_at = models.DateTimeField(null=True, blank=True)  # soft delete


class Member(models.Model):
    """One membership span: ``left_at`` set when the user leaves or is removed; a rejoin is a
    new row, so a user may have several rows per room, at most one of them current."""

    room = models.ForeignKey(Room, on_delete=models.CASCADE, related_name="members")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    joined_at = models.DateTimeField(db_default=TransactionNow())
    left_at = models.DateTimeField(null=True, blank=True)
    last_read_number = models.BigIntegerField(default=0)
    last_read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["room", "user"],
                condition=models.Q(left_at__isnull=True),
                name="talk_member_one_current",
            )
        ]
        # member_chats and member_spans look a user's rows up: (user, room).
        indexes = [models.Index(fields=["user", "room"], name="talk_member_user_room")]


class Post(models.Model):
    room = models.ForeignKey(Room, on_delete=models.CASCADE, related_name="posts")
    number = models.BigIntegerField()  # 1, 2, … per room: the push's seq
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="posts"
    )
    body = models.TextField()
    sent_at = models.DateTimeField(db_default=TransactionNow())
    edited_at = models.DateTimeField(null=True, blank=True)
    removed = models.BooleanField(default=False)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["room", "number"], name="talk_post_room_number")
        ]


class Reaction(models.Model):
    """An emoji a member put on a post. Removed by a plain ``DELETE`` (no row is kept): its
    push is the ids-only ``ReactionRemoved``, written beside the delete."""

    post = models.ForeignKey(Post, on_delete=models.CASCADE, related_name="reactions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reactions"
    )
    emoji = models.CharField(max_length=32)
    created_at = models.DateTimeField(db_default=TransactionNow())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["post", "user", "emoji"], name="talk_reaction_one_per_emoji"
            )
        ]


class RealtimeOutbox(models.Model):
    """``messenger.realtime_outbox``, the columns an owner writes (the others are the worker's).
    ``id`` is left to the database (``messenger.realtime_new_id()``, a UUIDv7 made after the
    statement took its locks) and read back on insert."""

    id = models.UUIDField(
        primary_key=True, db_default=models.Func(function="messenger.realtime_new_id")
    )
    kind = models.TextField()
    target_kind = models.TextField()
    chat_id = models.BigIntegerField(null=True)
    target_user_id = models.BigIntegerField(null=True)
    message_id = models.BigIntegerField(null=True)
    ref_id = models.BigIntegerField(null=True)
    session_kind = models.TextField(null=True)
    seq = models.BigIntegerField(null=True)

    class Meta:
        managed = False
        db_table = 'messenger"."realtime_outbox'
