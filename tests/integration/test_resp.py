"""The backplanes' own RESP paths (hub/backplane/resp.py, BackplaneSubscriber) against a real
Redis, and
behind a proxy that hangs or drops the connection."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

import pytest
from redis.exceptions import ResponseError

from realtime_dispatch.hub.backplane.resp import CommandConnection
from realtime_dispatch.hub.backplane.subscriber import BackplaneSubscriber, redis_client
from support.procs import wait_until
from tests.hub_fixtures import TcpProxy


def proxied(redis_url: str, proxy: TcpProxy) -> str:
    parts = urlsplit(redis_url)
    return parts._replace(netloc=f"127.0.0.1:{proxy.port}").geturl()


@contextlib.asynccontextmanager
async def commands_through(url: str, proxy: TcpProxy | None = None, **options: float):
    """A CommandConnection to ``url``'s Redis, through ``proxy`` if given; closed after."""
    client = redis_client(url if proxy is None else proxied(url, proxy))
    commands = CommandConnection(client, **options)
    try:
        yield commands
    finally:
        await commands.aclose()
        await client.aclose()


async def test_commands_are_pipelined_and_answered_in_order(redis_url):
    async with commands_through(redis_url) as commands:
        key = b"rd-test-resp"
        replies = await commands.pipeline(
            [(b"SET", key, b"1"), (b"INCR", key), (b"GET", key), (b"DEL", key)]
        )
        assert replies == [b"OK", 2, b"2", 1]
        overlapping = await asyncio.gather(
            *(commands.execute(b"ECHO", b"%d" % n) for n in range(50))
        )
        assert overlapping == [b"%d" % n for n in range(50)]
        with pytest.raises(ResponseError):
            await commands.execute(b"NO-SUCH-COMMAND")
        assert await commands.execute(b"PING") == b"PONG"  # the error left it in step


async def test_a_hung_connection_fails_its_commands_and_the_next_one_reconnects(redis_url):
    async with (
        TcpProxy(urlsplit(redis_url).port or 6379) as proxy,
        commands_through(redis_url, proxy, timeout=0.3) as commands,
    ):
        assert await commands.execute(b"PING") == b"PONG"
        proxy.stall()
        started = asyncio.get_running_loop().time()
        waiting = [asyncio.ensure_future(commands.execute(b"PING")) for _ in range(3)]
        for future in waiting:
            with pytest.raises(ConnectionError, match=r"no reply from Redis within 0\.3 s"):
                await future
        assert asyncio.get_running_loop().time() - started < 2
        proxy.resume()
        assert await commands.execute(b"PING") == b"PONG"


async def test_a_dropped_connection_fails_what_waits_and_the_next_command_reconnects(redis_url):
    async with (
        TcpProxy(urlsplit(redis_url).port or 6379) as proxy,
        commands_through(redis_url, proxy) as commands,
    ):
        assert await commands.execute(b"PING") == b"PONG"
        proxy.stall()
        waiting = asyncio.ensure_future(commands.execute(b"PING"))
        await asyncio.sleep(0.05)
        proxy.cut()
        with pytest.raises(ConnectionError):
            await waiting
        proxy.resume()
        proxy.release()
        assert await commands.execute(b"PING") == b"PONG"


async def test_a_subscriber_whose_connection_hangs_pings_then_reconnects(redis_url):
    delivered: list[tuple[str, bytes]] = []
    arrived = asyncio.Event()

    async def deliver(items, _marks=()):
        delivered.extend(items)
        arrived.set()

    channel = "rd-test-resp-sub"
    async with TcpProxy(urlsplit(redis_url).port or 6379) as proxy:
        subscriber = BackplaneSubscriber(
            proxied(redis_url, proxy), deliver, channel=channel, health_check_interval=0.2
        )
        task = asyncio.create_task(subscriber.run())
        publisher = redis_client(redis_url)
        try:
            await asyncio.wait_for(subscriber.ready.wait(), 10)
            await asyncio.sleep(0.5)  # silent for longer than the interval: its PINGs answered
            assert subscriber.ready.is_set()
            proxy.stall()
            # No answer to its PING: it gives the connection up.
            await wait_until(lambda: not subscriber.ready.is_set(), within=5)
            proxy.resume()
            await asyncio.wait_for(subscriber.ready.wait(), 10)
            await publisher.publish(f"{channel}:v2", b"chat:a\n2\n{}")
            await asyncio.wait_for(arrived.wait(), 5)
            assert delivered == [("chat:a", b"{}")]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await publisher.aclose()


async def test_messages_right_behind_the_subscription_are_read(redis_url):
    """What comes in the same read as the SUBSCRIBE confirmations is not lost."""
    delivered: list[tuple[str, bytes]] = []
    channel = "rd-test-resp-burst"

    async def deliver(items, _marks=()):
        delivered.extend(items)

    subscriber = BackplaneSubscriber(redis_url, deliver, channel=channel)
    publisher = redis_client(redis_url)
    spam = asyncio.Event()

    async def publish_until_stopped():
        n = 0
        while not spam.is_set():
            await publisher.publish(channel, f"user:x\n{n}".encode())
            n += 1
        return n

    flood = asyncio.create_task(publish_until_stopped())
    task = asyncio.create_task(subscriber.run())
    try:
        await asyncio.wait_for(subscriber.ready.wait(), 10)
        await asyncio.sleep(0.2)
        spam.set()
        await flood
        await asyncio.sleep(0.2)
        numbers = [int(frame) for _, frame in delivered]
        assert numbers, "nothing delivered"
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # no gap
    finally:
        spam.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await publisher.aclose()
