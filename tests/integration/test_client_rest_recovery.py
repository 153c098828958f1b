"""The SDK on the real messenger (REST + hub + dispatcher): File and Card messages arrive typed
in pushes and in history, a chat the user joined while offline is found on connect through
``GET /api/chats``, a send whose answer was lost is retried under the same ``clientMessageId``
and exists once, and a call whose every push is lost is joined through REST alone."""

from __future__ import annotations

from uuid import UUID

import asyncpg
import httpx

from realtime_dispatch.client import MessageEdited, MessageReceived, MessengerClient
from realtime_dispatch.client.rest import MessengerRest
from realtime_dispatch.contracts.calls import CallAnswered, CallInvited
from support.hub_wire import make_token
from support.procs import wait_until
from tests.fakes import RecordingPublisher
from tests.hub_fixtures import hub_settings
from tests.integration.client_stack import messenger_stack
from tests.integration.messenger_world import MEDIA_SETTINGS, verify_media

FILE = {"fileId": "f-9", "name": "a.png", "size": 10, "contentType": "image/png"}


async def test_file_and_card_messages_arrive_typed_and_offline_chats_are_found(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with messenger_stack(database_url, pool) as stack:
        async with MessengerClient(stack.url, make_token(stack.alice)) as alice:
            # Made while Bob is offline: no push reaches him.
            chat = await alice.rest.create_chat("offline", [stack.bob])
            await alice.rest.send_message(chat, "before you came")
        async with stack.client(stack.bob) as bob:
            await bob.wait_connected()
            await bob.settled()  # the connect's resume, chat listing and resyncs are done
            await wait_until(lambda: len(bob.timeline(chat)) == 1)
            assert chat in bob.chats
            assert (bob.chats[chat].last_seq, bob.chats[chat].read_seq) == (1, 0)

            live: list[MessageReceived] = []
            edits: list[MessageEdited] = []
            bob.on(MessageReceived, live.append)
            bob.on(MessageEdited, edits.append)
            async with MessengerClient(stack.url, make_token(stack.alice)) as alice:
                await alice.rest.send_message(chat, "caption", kind="File", file_meta=FILE)
                card = await alice.rest.send_message(chat, kind="Card", card_text="Lunch?")
                # Payloads are built at delivery: edit once the first state was pushed.
                await wait_until(lambda: len(live) == 2)
                await alice.rest.edit_message(chat, card.message_id, card_text="Dinner?")
            await wait_until(lambda: len(edits) == 1)
            assert [(e.kind, e.file_meta, e.card_text, e.body) for e in live] == [
                ("File", FILE, None, "caption"),
                ("Card", None, "Lunch?", None),
            ]
            assert edits[0].card_text == "Dinner?"
            timeline = bob.timeline(chat).messages()
            assert [(m.kind, m.card_text) for m in timeline] == [
                ("Text", None),
                ("File", None),
                ("Card", "Dinner?"),
            ]
            history = await bob.rest.messages_before(chat, 4, limit=2)
            assert [(m.seq, m.kind, m.file_meta) for m in history] == [
                (2, "File", FILE),
                (3, "Card", None),
            ]


class LoseFirstAnswer(httpx.AsyncBaseTransport):
    """The request reaches the server; its answer is lost on the way back, once."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.bodies: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and request.url.path.endswith("/messages"):
            self.bodies.append(request.content)
            if len(self.bodies) == 1:
                await response.aclose()
                raise httpx.ReadError("connection reset", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_retried_send_reuses_its_client_message_id_and_exists_once(
    database_url: str, pool: asyncpg.Pool
) -> None:
    async with messenger_stack(database_url, pool, dispatcher=False) as stack:
        async with MessengerClient(stack.url, make_token(stack.alice)) as alice:
            chat = await alice.rest.create_chat("retry", [])
        transport = LoseFirstAnswer(httpx.AsyncHTTPTransport())
        async with httpx.AsyncClient(base_url=stack.url, transport=transport) as http:
            rest = MessengerRest(http, make_token(stack.alice))
            sent = await rest.send_message(chat, "only once")
            assert sent.seq == 1
            other = await rest.send_message(chat, "only once")  # a new send: a new id
            assert other.seq == 2
        assert len(transport.bodies) == 3
        assert transport.bodies[0] == transport.bodies[1] != transport.bodies[2]
        count = await pool.fetchval(
            "SELECT count(*) FROM messenger.messages WHERE chat_id = $1", UUID(str(chat))
        )
        assert count == 2


async def test_a_call_whose_every_push_is_lost_is_joined_through_rest_alone(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """The dispatcher hands every push to a publisher that drops it (and reports success): Bob
    is connected and hears nothing, yet finds the ringing call, gets join credentials of his own
    and answers, all over REST."""
    settings = hub_settings(**MEDIA_SETTINGS)
    async with messenger_stack(database_url, pool, dispatcher=False, settings=settings) as stack:
        void = RecordingPublisher()
        await stack.start_dispatcher(void)
        async with stack.client(stack.bob) as bob, stack.http(stack.alice) as alice:
            heard: list[object] = []
            bob.on(CallInvited, heard.append)
            bob.on(CallAnswered, heard.append)
            await bob.wait_connected()
            call = (await alice.post("/api/calls", json={"calleeUserId": str(stack.bob)})).json()
            await wait_until(lambda: any(p.target == "call_invited" for p in void.pushes))
            async with stack.http(stack.bob) as rest:
                ringing = (await rest.get("/api/calls", params={"status": "Ringing"})).json()
                assert [c["callId"] for c in ringing["items"]] == [call["callId"]]
                media = await rest.post(f"/api/calls/{call['callId']}/media")
                assert media.status_code == 200, media.text
                verify_media(media.json(), subject=str(stack.bob))
                assert media.json()["roomName"] == ringing["items"][0]["roomName"]
                answer = await rest.post(f"/api/calls/{call['callId']}/answer")
                assert answer.status_code == 204
                state = (await rest.get(f"/api/calls/{call['callId']}")).json()
                assert state["status"] == "Active"
            await wait_until(lambda: any(p.target == "call_answered" for p in void.pushes))
            assert heard == []  # every push of the call was lost
