"""The talk app's writes. Each change and the outbox row that announces it are saved in one
``transaction.atomic()``: both commit, or neither. The row carries ids only; the worker reads
the content through ``projections.sql`` when it delivers. Membership needs no outbox row: the
trigger of migration 0003 tells the hubs (a hint, the manifest's ``member_chats`` is the truth).
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from talk.models import Member, Post, Reaction, RealtimeOutbox, Room, TransactionNow


class NotAMember(Exception):
    """The user has no current membership of the room."""


def create_room(title: str, users: list[AbstractBaseUser]) -> Room:
    with transaction.atomic():
        room = Room.objects.create(title=title)
        Member.objects.bulk_create([Member(room=room, user=user) for user in users])
    return room


def add_member(room_id: int, user: AbstractBaseUser) -> Member:
    """A join, or a rejoin: a new row beside the left ones."""
    with transaction.atomic():
        return Member.objects.create(room_id=room_id, user=user)


def remove_member(room_id: int, user: AbstractBaseUser) -> None:
    """A leave or a removal: the current row gets its ``left_at`` (soft delete)."""
    with transaction.atomic():
        Member.objects.filter(room_id=room_id, user=user, left_at__isnull=True).update(
            left_at=TransactionNow()
        )


def _require_member(room_id: int, user: AbstractBaseUser) -> Member:
    member = Member.objects.filter(room_id=room_id, user=user, left_at__isnull=True).first()
    if member is None:
        raise NotAMember(room_id)
    return member


def post_message(room_id: int, author: AbstractBaseUser, body: str) -> Post:
    with transaction.atomic():
        # The room's row lock numbers its posts in commit order.
        room = Room.objects.select_for_update().get(pk=room_id, deleted_at__isnull=True)
        _require_member(room.pk, author)
        room.last_number += 1
        room.save(update_fields=["last_number"])
        post = Post.objects.create(room=room, number=room.last_number, author=author, body=body)
        _push_post("MessageReceived", post)
    return post


def edit_message(post_id: int, editor: AbstractBaseUser, body: str) -> Post:
    with transaction.atomic():
        post = Post.objects.select_for_update().get(pk=post_id, author=editor, removed=False)
        post.body = body
        post.edited_at = TransactionNow()
        post.save(update_fields=["body", "edited_at"])
        _push_post("MessageEdited", post)
    return post


def remove_message(post_id: int, editor: AbstractBaseUser) -> None:
    """The post keeps its row (``removed``); the push carries no content."""
    with transaction.atomic():
        post = Post.objects.select_for_update().get(pk=post_id, author=editor)
        post.removed = True
        post.removed_at = TransactionNow()
        post.save(update_fields=["removed", "removed_at"])
        _push_post("MessageDeleted", post)


def _push_post(kind: str, post: Post) -> None:
    """The outbox row of a change to ``post``, in the caller's transaction: its room's group,
    the post's id and its number in the room as the push's seq."""
    RealtimeOutbox.objects.create(
        kind=kind,
        target_kind="ChatGroup",
        chat_id=post.room_id,
        message_id=post.pk,
        seq=post.number,
    )


def mark_read(room_id: int, user: AbstractBaseUser, number: int) -> None:
    with transaction.atomic():
        member = _require_member(room_id, user)
        member.last_read_number = max(member.last_read_number, number)
        member.last_read_at = TransactionNow()
        member.save(update_fields=["last_read_number", "last_read_at"])
        # ref_id: the membership row whose read mark moved (the room and the user are in it).
        RealtimeOutbox.objects.create(
            kind="ReadReceiptUpdated", target_kind="ChatGroup", chat_id=room_id, ref_id=member.pk
        )


def delete_room(room_id: int) -> None:
    """A soft delete: the manifest's deleted_chats then says the room is gone, and rows still
    pending for it end TargetGone instead of being delivered."""
    with transaction.atomic():
        Room.objects.filter(pk=room_id).update(deleted_at=TransactionNow())


def add_reaction(post_id: int, user: AbstractBaseUser, emoji: str) -> Reaction:
    """``ReactionAdded``, a kind of this app's own (declared in projections.sql with the query
    that reads the reaction when the worker delivers it)."""
    with transaction.atomic():
        post = Post.objects.get(pk=post_id, removed=False)
        _require_member(post.room_id, user)
        reaction = Reaction.objects.create(post=post, user=user, emoji=emoji)
        RealtimeOutbox.objects.create(
            kind="ReactionAdded",
            target_kind="ChatGroup",
            chat_id=post.room_id,
            ref_id=reaction.pk,
            message_id=post.pk,
        )
    return reaction


def remove_reaction(post_id: int, user: AbstractBaseUser, emoji: str) -> None:
    """A hard delete: nothing is left to read, so ``ReactionRemoved`` is declared
    ``-- payload: ids`` and pushes the row's own ids (the room, the reaction, the post)."""
    with transaction.atomic():
        post = Post.objects.get(pk=post_id)
        reaction = Reaction.objects.select_for_update().get(post=post, user=user, emoji=emoji)
        reaction_id = reaction.pk
        reaction.delete()
        RealtimeOutbox.objects.create(
            kind="ReactionRemoved",
            target_kind="ChatGroup",
            chat_id=post.room_id,
            ref_id=reaction_id,
            message_id=post.pk,
        )
