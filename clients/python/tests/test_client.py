"""The client SDK's own tests against a real hub, with nothing but ``realtime-dispatch-client``
and pytest installed: ``tests/e2e/test_client_install.py`` installs the distribution into a fresh
virtualenv, starts ``realtime-dispatch serve`` and runs these with its URL and JWT secret in
``CLIENT_TEST_URL`` / ``CLIENT_TEST_JWT_SECRET``. A connect, a push, a cut connection resumed from
the sync cursor, a live signal and a refused token."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID, uuid4

import pytest

from realtime_dispatch_client import (
    ClientOptions,
    ConnectionOptions,
    HubRefused,
    MessageReceived,
    MessengerClient,
    UserTyping,
)

URL = os.environ.get("CLIENT_TEST_URL", "")
SECRET = os.environ.get("CLIENT_TEST_JWT_SECRET", "")
FAST = ClientOptions(
    connection=ConnectionOptions(reconnect_base=0.1, reconnect_cap=0.5), resync_retry_cap=0.5
)

pytestmark = pytest.mark.skipif(
    not URL or not SECRET, reason="run through tests/e2e/test_client_install.py (needs a hub)"
)


def token(user: UUID, secret: str | None = None) -> str:
    """An HS256 JWT, as the hub expects (``sub`` and ``exp``), with the standard library."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"sub": str(user), "exp": int(time.time()) + 600}).encode())
    key = (secret or SECRET).encode()
    sig = b64(hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{sig}"


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 60))


async def until(predicate: Callable[[], bool], what: str, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


class Proxy:
    """A TCP proxy in front of the hub whose connections can be cut and refused, as a network
    failure would."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.open = True
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.open:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            writer.transport.abort()
            return
        self.writers |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except OSError:
                pass
            finally:
                sink.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self.writers -= {writer, up_writer}

    def cut(self) -> None:
        self.open = False
        for writer in self.writers:
            writer.transport.abort()

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


def bodies(client: MessengerClient, chat_id: UUID) -> list[str | None]:
    return [m.body for m in client.timeline(chat_id).messages()]


def test_two_users_chat_over_the_hub() -> None:
    async def scenario() -> None:
        alice, bob = uuid4(), uuid4()
        async with (
            MessengerClient(URL, token(alice), options=FAST) as a,
            MessengerClient(URL, token(bob), options=FAST) as b,
        ):
            pushed: list[str | None] = []
            b.on(MessageReceived, lambda event: pushed.append(event.body))
            await a.wait_connected()
            await b.wait_connected()
            chat = await a.rest.create_chat("client package", [bob])
            await a.track(chat)
            await b.track(chat)
            await a.rest.send_message(chat, "hi Bob")
            await until(lambda: bodies(b, chat) == ["hi Bob"], "Bob's timeline")
            await b.rest.send_message(chat, "hi Alice")
            await until(lambda: bodies(a, chat) == ["hi Bob", "hi Alice"], "Alice's timeline")
            await until(lambda: pushed == ["hi Bob", "hi Alice"], "Bob's pushes")
            assert b.stats.recovered == 0  # over the hub, not repaired from REST

    run(scenario)


def test_a_cut_connection_resumes_what_was_missed() -> None:
    async def scenario() -> None:
        alice, bob = uuid4(), uuid4()
        proxy = Proxy(urlsplit(URL).port or 80)
        via = await proxy.start()
        try:
            async with (
                MessengerClient(URL, token(alice), options=FAST) as a,
                MessengerClient(via, token(bob), options=FAST) as b,
            ):
                resumed: list[int] = []
                b.on_resumed(resumed.append)
                await a.wait_connected()
                await b.wait_connected()
                chat = await a.rest.create_chat("cut", [bob])
                await a.track(chat)
                await b.track(chat)
                await a.rest.send_message(chat, "before")
                await until(lambda: bodies(b, chat) == ["before"], "the first message")
                proxy.cut()  # Bob's connection drops and cannot come back yet
                await until(lambda: not b.connected, "Bob disconnected")
                await a.rest.send_message(chat, "while away")
                # pushed to the chat's group (Alice has it) while Bob was away
                await until(lambda: bodies(a, chat) == ["before", "while away"], "the push")
                proxy.open = True
                await until(lambda: bodies(b, chat) == ["before", "while away"], "the resume")
                assert b.stats.resumes >= 1
                assert b.stats.missed >= 1  # from GET /api/sync, not from a push
                assert sum(resumed) >= 1
                assert b.stats.full_resyncs == 1  # the first connect's only
        finally:
            await proxy.close()

    run(scenario)


def test_typing_reaches_the_other_member() -> None:
    async def scenario() -> None:
        alice, bob = uuid4(), uuid4()
        async with (
            MessengerClient(URL, token(alice), options=FAST) as a,
            MessengerClient(URL, token(bob), options=FAST) as b,
        ):
            typing: list[UserTyping] = []
            a.on(UserTyping, typing.append)
            await a.wait_connected()
            await b.wait_connected()
            chat = await a.rest.create_chat("signals", [bob])
            await a.track(chat)
            await b.track(chat)
            await b.typing(chat)
            await until(lambda: len(typing) == 1, "Bob typing")
            assert (typing[0].chat_id, typing[0].user_id) == (chat, bob)

    run(scenario)


def test_a_refused_token_comes_out_of_the_block() -> None:
    async def scenario() -> None:
        forged = token(uuid4(), secret="not-the-hub-secret-not-the-hub-secret")
        with pytest.raises(HubRefused):
            async with MessengerClient(URL, forged, options=FAST) as client:
                await client.wait_connected()

    run(scenario)
