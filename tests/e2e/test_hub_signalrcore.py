"""Third-party SignalR clients as people use them, against the hub: ``signalrcore`` (PyPI; JSON
and MessagePack, over negotiate and with it skipped) and ``pysignalr`` (both protocols), each
receiving pushes and invoking ``Typing``, whose ``user_typing`` reaches the chat's other member.

signalrcore negotiates without ``negotiateVersion`` (version 0): it needs the field in the
answer (``0``), and it reads a MessagePack Invocation as six elements (the stream ids last), as
ASP.NET Core writes it. It is a threaded client: its calls run in threads here, its callbacks
hand what they get to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pysignalr.client import SignalRClient
from pysignalr.protocol.json import JSONProtocol
from pysignalr.protocol.messagepack import MessagepackProtocol
from signalrcore.hub_connection_builder import HubConnectionBuilder
from signalrcore.protocol.json_hub_protocol import JsonHubProtocol
from signalrcore.protocol.messagepack_protocol import MessagePackHubProtocol

from realtime_dispatch.hub.connections.registry import user_group
from support.hub_wire import make_token
from tests.hub_fixtures import RunningHub, hub_settings, push, running_hub
from tests.integration.chat_pairs import alice_bob_and_a_chat

pytestmark = pytest.mark.e2e


class Inbox:
    """What a client's callbacks received, by event name, for the test's event loop (the
    callbacks may run in another thread)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queues: dict[str, asyncio.Queue[list[Any]]] = {}

    def queue(self, name: str) -> asyncio.Queue[list[Any]]:
        return self._queues.setdefault(name, asyncio.Queue())

    def put_threadsafe(self, name: str, arguments: list[Any]) -> None:
        self._loop.call_soon_threadsafe(self.queue(name).put_nowait, arguments)

    async def get(self, name: str) -> list[Any]:
        async with asyncio.timeout(10):
            return await self.queue(name).get()


@contextlib.asynccontextmanager
async def signalrcore_client(
    hub: RunningHub, user: uuid.UUID, *, protocol: str, skip_negotiation: bool
) -> AsyncIterator[tuple[Any, Inbox]]:
    inbox = Inbox()
    token = make_token(user)
    url = f"{hub.http_url}/hubs/messenger"
    if skip_negotiation:
        url = url.replace("http://", "ws://")
    connection = (
        HubConnectionBuilder()
        .with_url(
            url,
            options={"access_token_factory": lambda: token, "skip_negotiation": skip_negotiation},
        )
        .with_hub_protocol(
            MessagePackHubProtocol() if protocol == "messagepack" else JsonHubProtocol()
        )
        .configure_logging(logging.WARNING)
        .build()
    )
    opened = asyncio.Event()
    loop = asyncio.get_running_loop()
    connection.on_open(lambda: loop.call_soon_threadsafe(opened.set))
    for name in ("contact_request_received", "reaction_added", "user_typing"):
        connection.on(name, lambda arguments, name=name: inbox.put_threadsafe(name, arguments))
    started = await asyncio.to_thread(connection.start)
    assert started, "signalrcore did not start"
    try:
        async with asyncio.timeout(10):
            await opened.wait()
        yield connection, inbox
    finally:
        # signalrcore's stop closes its socket and then joins its receiving thread, which sits
        # in a blocking read until the server sends a frame or closes: it is not waited for
        # here, the hub's shutdown at the end of the test ends it.
        threading.Thread(target=connection.stop, daemon=True, name="signalrcore-stop").start()


async def _wait_for_connections(hub: RunningHub, count: int) -> None:
    async with asyncio.timeout(10):
        while len(hub.hub.connections) < count:  # noqa: ASYNC110 (the hub's own state)
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("skip_negotiation", [False, True], ids=["negotiate", "skip-negotiate"])
@pytest.mark.parametrize("protocol", ["json", "messagepack"])
async def test_signalrcore_receives_pushes_and_invokes_typing(
    database_url, pool, protocol: str, skip_negotiation: bool
) -> None:
    alice, bob, chat = await alice_bob_and_a_chat(pool)
    async with (
        running_hub(hub_settings(), dsn=database_url, pool=pool) as hub,
        signalrcore_client(hub, alice, protocol=protocol, skip_negotiation=skip_negotiation) as (
            connection,
            _,
        ),
        signalrcore_client(hub, bob, protocol=protocol, skip_negotiation=skip_negotiation) as (
            _,
            bob_inbox,
        ),
    ):
        await _wait_for_connections(hub, 2)
        assert {c.protocol.name for c in hub.hub.connections.values()} == {protocol}
        # A built-in event and a name the hub has no model for (an app's declared kind).
        await push(hub, user_group(bob), "contact_request_received", {"fromUserId": "x"})
        assert await bob_inbox.get("contact_request_received") == [{"fromUserId": "x"}]
        reaction = {"eventId": str(uuid.uuid4()), "chatId": str(chat), "emoji": "👍"}
        await push(hub, user_group(bob), "reaction_added", reaction)
        assert await bob_inbox.get("reaction_added") == [reaction]

        completions: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        connection.invoke(
            "Typing",
            [str(chat)],
            on_invocation=lambda message: loop.call_soon_threadsafe(
                completions.put_nowait, message
            ),
        )
        [typing] = await bob_inbox.get("user_typing")
        assert typing["chatId"] == str(chat)
        assert typing["userId"] == str(alice)
        async with asyncio.timeout(10):
            completion = await completions.get()
        assert getattr(completion, "error", None) is None


@pytest.mark.parametrize("protocol", ["json", "messagepack"])
async def test_pysignalr_receives_pushes_and_invokes_typing(database_url, pool, protocol: str):
    alice, bob, chat = await alice_bob_and_a_chat(pool)
    async with running_hub(hub_settings(), dsn=database_url, pool=pool) as hub:
        inbox = Inbox()
        clients = {}
        tasks = []
        for user in (alice, bob):
            client = SignalRClient(
                f"{hub.http_url}/hubs/messenger",
                protocol=MessagepackProtocol() if protocol == "messagepack" else JSONProtocol(),
                headers={"Authorization": f"Bearer {make_token(user)}"},
            )
            if user == bob:
                for name in ("reaction_added", "user_typing"):

                    async def on_message(arguments: list[Any], name: str = name) -> None:
                        inbox.queue(name).put_nowait(arguments)

                    client.on(name, on_message)
            opened = asyncio.Event()

            async def on_open(opened: asyncio.Event = opened) -> None:
                opened.set()

            client.on_open(on_open)
            clients[user] = (client, opened)
            tasks.append(asyncio.create_task(client.run()))
        try:
            async with asyncio.timeout(10):
                for _, opened in clients.values():
                    await opened.wait()
            assert {c.protocol.name for c in hub.hub.connections.values()} == {protocol}
            reaction = {"eventId": str(uuid.uuid4()), "chatId": str(chat), "emoji": "🎉"}
            await push(hub, user_group(bob), "reaction_added", reaction)
            assert await inbox.get("reaction_added") == [reaction]
            await clients[alice][0].send("Typing", [str(chat)])
            [typing] = await inbox.get("user_typing")
            assert typing["chatId"] == str(chat)
            assert typing["userId"] == str(alice)
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
