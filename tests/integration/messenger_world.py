"""The scenario against the real thing: a hub served by uvicorn in this event loop, the real
dispatcher (``dispatch_service``) publishing through the hub's in-process publisher (or, with
``backplane_url``, through Redis as ``realtime-dispatch worker`` does, membership marks on), and
one raw SignalR client per user over a real WebSocket."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import asyncpg
import jwt
import pytest
from pydantic import SecretStr

from realtime_dispatch.auth.media import MediaOptions
from realtime_dispatch.delivery.push import HubPublisher
from realtime_dispatch.dispatch.metrics import DispatchMetrics
from realtime_dispatch.dispatch.options import RealtimeDispatchOptions
from realtime_dispatch.dispatch.service import dispatch_service
from realtime_dispatch.hub.backplane.publishers import RedisHubPublisher
from realtime_dispatch.outbox.model import RealtimeDispatchKind
from support.hub_wire import make_token
from support.procs import wait_until
from tests.hub_fixtures import RawClient, RunningHub, hub_settings, raw_client, running_hub
from tests.integration.messenger_scenario import (
    CREATED,
    Ctx,
    Step,
    expected_shape,
    last_id,
    new_rows,
    row_shape,
)

JITSI_SECRET = "jitsi-app-secret-for-tests-0123456789"
TURN_SECRET = "turn-shared-secret-for-tests-0123456789"
MEDIA = MediaOptions(
    jitsi_app_id="rd-tests",
    jitsi_app_secret=SecretStr(JITSI_SECRET),
    jitsi_domain="meet.test",
    turn_urls=("turn:turn.test:3478?transport=udp", "turns:turn.test:5349"),
    turn_secret=SecretStr(TURN_SECRET),
    token_ttl=90,
)
FAST = RealtimeDispatchOptions(
    polling_interval=0.2, backoff_base=0.05, backoff_cap=0.2, max_run_duration=2, lock_ttl=10
)


@dataclass
class Received:
    user: str
    event: str
    payload: dict[str, Any]


@dataclass
class World:
    ctx: Ctx
    clients: dict[str, RawClient]
    hub: RunningHub
    received: list[Received] = field(default_factory=list)
    metrics: DispatchMetrics | None = None  # the dispatch service's

    @property
    def pool(self) -> asyncpg.Pool:
        return self.ctx.pool

    async def recipients(self, group: str) -> list[str]:
        kind, _, raw = group.partition(":")
        names = {uid: name for name, uid in self.ctx.users.items()}
        if kind == "user":
            return [names[UUID(raw)]]
        rows = await self.pool.fetch(
            "SELECT user_id FROM messenger.participants WHERE chat_id = $1 AND active", UUID(raw)
        )
        return sorted(names[r["user_id"]] for r in rows)

    async def play(self, step: Step) -> list[asyncpg.Record]:
        """Run the step's command; check its rows; wait until they are Done; check that every
        recipient got the event with the expected payload (others are checked by
        :meth:`assert_quiet`)."""
        mark = await last_id(self.pool)
        async with self.pool.acquire() as conn:
            await step.run(self.ctx, conn)
        rows = await new_rows(self.pool, mark)
        assert [row_shape(r) for r in rows] == expected_shape(step.expect(self.ctx)), step.name
        await self.delivered(step, rows)
        return rows

    async def delivered(self, step: Step, rows: list[asyncpg.Record]) -> None:
        """Wait until ``rows`` are Done; every recipient got each one, checked by ``step``."""
        ids = [r["id"] for r in rows]

        async def done() -> bool:
            return bool(
                await self.pool.fetchval(
                    "SELECT bool_and(status = 'Done') FROM messenger.realtime_outbox"
                    " WHERE id = ANY($1::uuid[])",
                    ids,
                )
            )

        await wait_until(done, within=10)
        for row in rows:
            event = RealtimeDispatchKind(row["kind"]).event_name
            for name in await self.recipients(row_shape(row)[1]):
                record = await self.clients[name].next_of([1])
                assert record["target"] == event, (step.name, name, record)
                [payload] = record["arguments"]
                step.check(self.ctx, name, payload)
                self.received.append(Received(name, event, payload))

    async def assert_quiet(self, seconds: float = 0.3) -> None:
        """Nobody has an event left over: no extra delivery reached anyone."""
        await asyncio.gather(*(c.assert_silent(seconds) for c in self.clients.values()))


@contextlib.asynccontextmanager
async def world(
    database_url: str,
    pool: asyncpg.Pool,
    media: MediaOptions = MEDIA,
    *,
    backplane_url: str | None = None,
) -> AsyncIterator[World]:
    ctx = Ctx(pool)
    await ctx.setup()
    # The chat's creation pushed its ChatCreated: delivered once the clients are connected.
    created = await new_rows(pool, UUID(int=0))
    assert [row_shape(r) for r in created] == expected_shape(CREATED.expect(ctx))
    async with contextlib.AsyncExitStack() as stack:
        settings = (
            hub_settings(backplane_enabled=True, redis_url=backplane_url)
            if backplane_url
            else hub_settings()
        )
        running = await stack.enter_async_context(
            running_hub(settings, dsn=database_url, pool=pool)
        )
        publisher: HubPublisher = running.hub.publisher()
        if backplane_url:
            publisher = RedisHubPublisher(backplane_url)
            stack.push_async_callback(publisher.aclose)
        clients = {
            name: await stack.enter_async_context(raw_client(running, make_token(uid)))
            for name, uid in ctx.users.items()
        }
        service = await stack.enter_async_context(
            dispatch_service(
                database_url,
                FAST,
                publisher,
                media=media,
                membership_marks=True,  # as `serve` and `worker` (with the backplane) run it
            )
        )
        w = World(ctx, clients, running, metrics=service.metrics)
        await w.delivered(CREATED, created)
        yield w


def verify_media(media: dict[str, Any], *, subject: str) -> dict[str, Any]:
    claims: dict[str, Any] = jwt.decode(
        media["accessToken"], JITSI_SECRET, algorithms=["HS256"], audience="jitsi"
    )
    assert claims["iss"] == MEDIA.jitsi_app_id
    assert claims["sub"] == MEDIA.jitsi_domain
    assert claims["room"] == media["roomName"]
    now = time.time()
    assert now < claims["exp"] <= now + MEDIA.token_ttl + 2
    [ice] = media["iceServers"]
    assert ice["urls"] == list(MEDIA.turn_urls)
    expiry, _, who = ice["username"].partition(":")
    assert who == subject
    assert int(expiry) == claims["exp"]
    digest = hmac.new(TURN_SECRET.encode(), ice["username"].encode(), hashlib.sha1).digest()
    assert ice["credential"] == base64.b64encode(digest).decode()
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(
            media["accessToken"],
            "another-secret-of-32-bytes-length!",
            algorithms=["HS256"],
            audience="jitsi",
        )
    return claims


MEDIA_SETTINGS = {
    "media_jitsi_app_id": MEDIA.jitsi_app_id,
    "media_jitsi_app_secret": JITSI_SECRET,
    "media_jitsi_domain": MEDIA.jitsi_domain,
    "media_turn_urls": ",".join(MEDIA.turn_urls),
    "media_turn_secret": MEDIA.turn_secret.get_secret_value() if MEDIA.turn_secret else None,
    "media_token_ttl": MEDIA.token_ttl,
}
