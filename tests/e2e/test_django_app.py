"""``examples/django`` end to end: the Django project's own migrations (its models, the outbox
from ``migrate --print-sql --only outbox`` as a ``RunSQL``, the membership trigger) and its
writes through the ORM (services in ``transaction.atomic()``, one through a view) on bigint
keys, against real ``hub`` and ``worker`` processes on ``examples/django/projections.sql``. The
official SignalR client receives a message and its edit with the ids of Django's rows as JSON
numbers; membership follows removals, joins and a rejoin live (a data fix on a left row keeps
the rejoined member in); the Python SDK resumes a missed message through ``GET /api/sync``
after its connection is cut. Reactions, kinds of the app's own declared in its manifest, reach
the members (official client, the Python SDK's connection), resume through sync, and reach no
non-member.

Django runs in this process, on one thread of its own (its ORM refuses an event loop's thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import pytest

from realtime_dispatch.client import MessengerClient, ResyncReason
from realtime_dispatch.client.client import ClientOptions
from realtime_dispatch.client.connection import ConnectionOptions, HubClientConnection
from realtime_dispatch.client.protocol import EventRecord
from realtime_dispatch.client.rest import MessengerRest
from realtime_dispatch.contracts.messages import MessageReceived
from realtime_dispatch.messenger.schema import selected_migrations
from realtime_dispatch.outbox.migrate import migration_script
from realtime_dispatch.values.keys import key_codec
from support.databases import scratch_database
from support.hub_wire import SECRET, SERVICE_KEY
from support.procs import cli_env, free_port, running, wait_until
from tests.hub_fixtures import NodeClient, TcpProxy

pytestmark = pytest.mark.e2e

APP = Path(__file__).resolve().parents[2] / "examples" / "django"
TARGETS = ["message_received", "message_edited"]
T = TypeVar("T")


@dataclass
class Site:
    """The Django project on its database, with ``hub`` and ``worker`` running on it."""

    url: str
    base: str
    executor: ThreadPoolExecutor

    @property
    def hub_url(self) -> str:
        return f"{self.base}/hubs/messenger"

    async def django(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on Django's thread."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, call, *args)

    async def users(self, *names: str) -> list[Any]:
        from django.contrib.auth.models import User

        return [await self.django(lambda n=n: User.objects.create(username=n)) for n in names]

    async def client(self, user: Any) -> NodeClient:
        from talk.tokens import hub_token

        token = await self.django(hub_token, user)
        client = await NodeClient.start(self.hub_url, token, targets=TARGETS)
        assert (await client.event(within=30))["event"] == "started"
        return client


def _set_up_django(url: str) -> None:
    from django.core.management import call_command

    import django

    os.environ["DJANGO_SETTINGS_MODULE"] = "talkproject.settings"
    os.environ["TALK_DATABASE_URL"] = url
    os.environ["REALTIME_HUB_JWT_SECRET"] = SECRET
    if str(APP) not in sys.path:
        sys.path.insert(0, str(APP))
    django.setup()
    call_command("migrate", verbosity=0)


def _close_django() -> None:
    from django.db import connections

    connections.close_all()


@pytest.fixture(scope="module")
async def site(pg_server_url: str) -> AsyncIterator[Site]:
    saved = {k: os.environ.get(k) for k in ("TALK_DATABASE_URL", "REALTIME_HUB_JWT_SECRET")}
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="django")
    try:
        async with scratch_database(pg_server_url, prefix="rd_django") as url:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(executor, _set_up_django, url)
            env = cli_env(
                REALTIME_DATABASE_URL=url,
                REALTIME_PROJECTIONS=str(APP / "projections.sql"),
                REALTIME_KEY_TYPE="bigint",
            )
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            hub_env = {
                **env,
                "REALTIME_HUB_JWT_SECRET": SECRET,
                "REALTIME_HUB_SERVICE_KEY": SERVICE_KEY,
            }
            worker_env = {**env, "REALTIME_HUB_URL": base, "REALTIME_HUB_SERVICE_KEY": SERVICE_KEY}
            async with (
                running("hub", "--port", str(port), env=hub_env, ready=b"listening on"),
                running("worker", env=worker_env, ready=b"dispatcher_connected"),
            ):
                yield Site(url, base, executor)
            await loop.run_in_executor(executor, _close_django)
    finally:
        executor.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_the_outbox_migration_is_what_migrate_prints() -> None:
    """``talk/sql/realtime_outbox.sql`` is today's ``migrate --print-sql --only outbox`` with
    bigint keys: regenerate it (examples/django/README.md) when the outbox's migrations change."""
    script = migration_script(selected_migrations(with_messenger=False, keys=key_codec("bigint")))
    assert (APP / "talk" / "sql" / "realtime_outbox.sql").read_text() == script


async def next_message(client: NodeClient, target: str) -> dict[str, Any]:
    event = await client.event(within=30)
    assert (event["event"], event.get("target")) == ("message", target), event
    payload: dict[str, Any] = event["args"][0]
    return payload


async def test_a_message_and_its_edit(site: Site) -> None:
    from django.test import RequestFactory
    from talk import services, views
    from talk.models import Post, RealtimeOutbox

    alice, bob = await site.users("alice", "bob")
    room = await site.django(services.create_room, "general", [alice, bob])
    a, b = await site.client(alice), await site.client(bob)
    try:
        # Posted through the view, as a signed-in request would.
        def post_through_view() -> dict[str, Any]:
            request = RequestFactory().post(
                f"/rooms/{room.pk}/posts", json.dumps({"body": "hello"}), "application/json"
            )
            request.user = alice
            response = views.post_message(request, room.pk)
            assert response.status_code == 201, response.content
            created: dict[str, Any] = json.loads(response.content)
            return created

        created = await site.django(post_through_view)
        post = await site.django(lambda: Post.objects.get(pk=created["id"]))
        event_id = await site.django(lambda: str(RealtimeOutbox.objects.get(message_id=post.pk).id))
        payload = await next_message(b, "message_received")
        assert payload == {
            "eventId": event_id,
            "chatId": room.pk,
            "messageId": post.pk,
            "seq": 1,
            "senderUserId": alice.pk,
            "kind": "Text",
            "sentAt": post.sent_at.isoformat().replace("+00:00", "Z"),
            "body": "hello",
        }
        assert await next_message(a, "message_received") == payload

        await site.django(services.edit_message, post.pk, alice, "hello, edited")
        edited = await next_message(b, "message_edited")
        assert (edited["chatId"], edited["messageId"], edited["seq"]) == (room.pk, post.pk, 1)
        assert edited["body"] == "hello, edited"
        assert edited["editedAt"] is not None
        assert await next_message(a, "message_edited") == edited
    finally:
        await a.stop()
        await b.stop()


async def test_membership_follows_the_database_live(site: Site) -> None:
    from talk import services
    from talk.models import Member, TransactionNow

    ana, ben, cid = await site.users("ana", "ben", "cid")
    room = await site.django(services.create_room, "team", [ana, ben])
    side = await site.django(services.create_room, "side", [ana, ben])
    a, b, c = await site.client(ana), await site.client(ben), await site.client(cid)
    try:
        # Ben is removed, Cid added, both while connected.
        await site.django(services.remove_member, room.pk, ben)
        await site.django(services.add_member, room.pk, cid)
        first = await site.django(services.post_message, room.pk, ana, "ben left, cid joined")
        assert (await next_message(c, "message_received"))["messageId"] == first.pk
        assert (await next_message(a, "message_received"))["messageId"] == first.pk
        # That push is done before this one is written: Ben's next push is this one.
        second = await site.django(services.post_message, side.pk, ana, "side room")
        assert (await next_message(b, "message_received"))["messageId"] == second.pk
        assert (await next_message(a, "message_received"))["messageId"] == second.pk

        # Ben rejoins (a new row); a data fix on his old, left row then fires the trigger too:
        # the hub reads his rooms again and keeps him in.
        old = await site.django(lambda: Member.objects.get(room=room, user=ben).pk)
        await site.django(services.add_member, room.pk, ben)
        await site.django(lambda: Member.objects.filter(pk=old).update(left_at=TransactionNow()))
        third = await site.django(services.post_message, room.pk, ana, "welcome back")
        for client in (b, c, a):
            assert (await next_message(client, "message_received"))["messageId"] == third.pk
    finally:
        for client in (a, b, c):
            await client.stop()


async def test_resume_after_a_disconnect_through_sync(site: Site) -> None:
    from talk import services
    from talk.tokens import hub_token

    eve, fay = await site.users("eve", "fay")
    room = await site.django(services.create_room, "resume", [eve, fay])
    token = await site.django(hub_token, fay)
    live: list[MessageReceived] = []
    reasons: list[ResyncReason] = []
    options = ClientOptions(
        connection=ConnectionOptions(reconnect_base=0.05, reconnect_cap=0.3), key_type="bigint"
    )
    conn = await asyncpg.connect(site.url)
    try:
        async with (
            TcpProxy(int(site.base.rsplit(":", 1)[1])) as proxy,
            MessengerClient(
                f"http://127.0.0.1:{proxy.port}", token, options=options, resync=reasons.append
            ) as fay_client,
        ):
            fay_client.on(MessageReceived, live.append)
            await wait_until(lambda: reasons == ["start"], within=30)
            before = await site.django(services.post_message, room.pk, eve, "before")
            await wait_until(lambda: [m.message_id for m in live] == [before.pk], within=30)

            proxy.cut()  # Fay's connection drops; what is written meanwhile reaches nobody
            missed = await site.django(services.post_message, room.pk, eve, "while away")

            async def done() -> bool:
                status = await conn.fetchval(
                    "SELECT status FROM messenger.realtime_outbox WHERE message_id = $1",
                    missed.pk,
                )
                return bool(status == "Done")

            await wait_until(done, within=30)
            assert [m.message_id for m in live] == [before.pk]
            proxy.release()
            await wait_until(lambda: len(live) == 2, within=30)
            assert (live[1].message_id, live[1].chat_id, live[1].body) == (
                missed.pk,
                room.pk,
                "while away",
            )
            assert fay_client.stats.resumes >= 1
            assert fay_client.stats.missed == 1
            assert reasons == ["start"]  # resumed, not resynced
    finally:
        await conn.close()


class _Events:
    """A :class:`HubListener` of the Python SDK's own connection that keeps every event (the
    declared ones included: the SDK's typed client takes the 26 built-in events only)."""

    def __init__(self) -> None:
        self.records: list[EventRecord] = []
        self.connected = asyncio.Event()

    async def hub_connected(self, reconnect: bool) -> None:
        self.connected.set()

    async def hub_disconnected(self) -> None:
        self.connected.clear()

    async def hub_event(self, record: EventRecord) -> None:
        self.records.append(record)

    def of(self, target: str) -> list[dict[str, Any]]:
        return [r.arguments[0] for r in self.records if r.target == target]


async def test_reactions_declared_in_the_manifest(site: Site) -> None:
    """``ReactionAdded`` (a query) and ``ReactionRemoved`` (ids only, written beside the
    ``DELETE``) reach the room's members through the official client and the Python SDK's
    connection, are resumed through ``GET /api/sync`` after a disconnect, and reach neither a
    non-member's connection nor their sync."""
    from talk import services
    from talk.models import RealtimeOutbox
    from talk.tokens import hub_token

    gil, hal, ivy = await site.users("gil", "hal", "ivy")
    room = await site.django(services.create_room, "reactions", [gil, hal])
    post = await site.django(services.post_message, room.pk, gil, "react to me")  # pushed to none
    targets = ["reaction_added", "reaction_removed", "message_received"]
    node_hal = await NodeClient.start(
        site.hub_url, await site.django(hub_token, hal), targets=targets
    )
    node_ivy = await NodeClient.start(
        site.hub_url, await site.django(hub_token, ivy), targets=targets
    )
    conn = await asyncpg.connect(site.url)
    listener = _Events()
    gil_token = await site.django(hub_token, gil)
    ivy_token = await site.django(hub_token, ivy)
    try:
        for client in (node_hal, node_ivy):
            assert (await client.event(within=30))["event"] == "started"
        async with (
            TcpProxy(int(site.base.rsplit(":", 1)[1])) as proxy,
            httpx.AsyncClient(base_url=site.base, timeout=10) as http,
        ):
            gil_rest = MessengerRest(http, gil_token)
            ivy_rest = MessengerRest(http, ivy_token)
            cursor = (await gil_rest.sync()).next_cursor
            ivy_cursor = (await ivy_rest.sync()).next_cursor
            hub = HubClientConnection(
                f"http://127.0.0.1:{proxy.port}",
                gil_token,
                listener,
                ConnectionOptions(reconnect_base=0.05, reconnect_cap=0.3),
            )
            running_hub = asyncio.create_task(hub.run())
            try:
                await asyncio.wait_for(listener.connected.wait(), 30)

                reaction = await site.django(services.add_reaction, post.pk, hal, "👍")
                added_id = await site.django(
                    lambda: str(
                        RealtimeOutbox.objects.get(kind="ReactionAdded", ref_id=reaction.pk).id
                    )
                )
                added = await next_message(node_hal, "reaction_added")
                assert added == {
                    "eventId": added_id,
                    "chatId": room.pk,
                    "refId": reaction.pk,
                    "messageId": post.pk,
                    "userId": hal.pk,
                    "emoji": "👍",
                    "createdAt": reaction.created_at.isoformat().replace("+00:00", "Z"),
                }
                await wait_until(lambda: listener.of("reaction_added") == [added], within=30)

                proxy.cut()  # Gil's connection drops: what follows is resumed through sync
                party = await site.django(services.add_reaction, post.pk, hal, "🎉")
                await site.django(services.remove_reaction, post.pk, hal, "👍")
                added_away = await next_message(node_hal, "reaction_added")
                assert (added_away["refId"], added_away["emoji"]) == (party.pk, "🎉")
                removed = await next_message(node_hal, "reaction_removed")
                assert {k: v for k, v in removed.items() if k != "eventId"} == {
                    "chatId": room.pk,
                    "refId": reaction.pk,
                    "messageId": post.pk,
                }
                assert listener.of("reaction_removed") == []
                page = await gil_rest.sync(cursor)
                # Built from the current state, as every event of a sync page: the 👍 is gone,
                # so its reaction_added is left out and its removal follows.
                assert [(e.target, e.payload) for e in page.events] == [
                    ("reaction_added", added_away),
                    ("reaction_removed", removed),
                ]
                assert [str(e.event_id) for e in page.events] == [
                    added_away["eventId"],
                    removed["eventId"],
                ]
                proxy.release()
            finally:
                running_hub.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running_hub

            # The non-member: nothing live (their next event is their own room's message),
            # nothing in sync.
            ivy_room = await site.django(services.create_room, "ivy's", [ivy])
            own = await site.django(services.post_message, ivy_room.pk, ivy, "mine")
            first = await node_ivy.event(within=30)
            assert (first.get("target"), first["args"][0]["messageId"]) == (
                "message_received",
                own.pk,
            )
            ivy_page = await ivy_rest.sync(ivy_cursor)
            assert [e.target for e in ivy_page.events] == ["message_received"]
        statuses = await conn.fetch(
            "SELECT kind, status FROM messenger.realtime_outbox"
            " WHERE kind IN ('ReactionAdded', 'ReactionRemoved')"
        )
        assert sorted((r["kind"], r["status"]) for r in statuses) == [
            ("ReactionAdded", "Done"),
            ("ReactionAdded", "Done"),
            ("ReactionRemoved", "Done"),
        ]
    finally:
        await conn.close()
        await node_hal.stop()
        await node_ivy.stop()
