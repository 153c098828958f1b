"""Who is online across the replicas, in Redis: :class:`RedisPresenceStore`.

One hash per user, ``realtime-dispatch:presence:{userId}`` (its own slot on a cluster):

* ``r:{replica}`` → when that replica's claim expires (epoch seconds). A replica writes it when
  the user's first connection there opens, rewrites every user's every ``refresh`` seconds
  (pipelined), and deletes it when the user's last connection there closed ``grace`` ago.
* ``seen`` → ``lastSeenAt``, written when the last claim goes.

A user is online while one claim has not expired. The two transitions are Lua scripts, so two
replicas racing cannot both miss (or both make) the announcement: going online answers whether
no other replica held a live claim (then the replica announces it), going offline whether none
is left. Nothing is written per connection, only per user's first and last connection on a
replica, and a reconnect inside the grace writes nothing at all. The key lives
:data:`SEEN_TTL` after its last write, which is how long ``lastSeenAt`` is remembered.

A replica that dies without closing cannot say its users left. Every replica therefore
heartbeats in :data:`REPLICAS_KEY` (at each refresh) and lists the users it holds online in a set
of its own (:func:`replica_users_key`, written with the transitions and again at each refresh).
At each refresh a replica looks for replicas whose heartbeat expired (``3 × refresh``); the one
that takes a dead replica's sweep (``SET NX``) runs the offline script for each of its users,
with its last heartbeat as ``lastSeenAt``, and announces those nobody holds any more. The cost
is per failure, not per user and interval.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from realtime_dispatch.hub.signals.wire_ids import parse_key
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

SEEN_TTL = 30 * 24 * 3600
CONCURRENT = 16
"""On a cluster: transitions (one script call each) in flight at once; on one Redis they are
pipelined, :data:`REFRESH_CHUNK` a round trip."""
REFRESH_CHUNK = 1000

_ONLINE = """
local was, seen = 0, ''
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local f = fields[i]
  if f == 'seen' then seen = fields[i + 1]
  elseif f ~= ARGV[1] then
    if tonumber(fields[i + 1]) > tonumber(ARGV[3]) then was = 1
    else redis.call('HDEL', KEYS[1], f) end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {was, seen}
"""

_OFFLINE = """
redis.call('HDEL', KEYS[1], ARGV[1])
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  if fields[i] ~= 'seen' and tonumber(fields[i + 1]) > tonumber(ARGV[2]) then return 0 end
end
redis.call('HSET', KEYS[1], 'seen', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""


REPLICAS_KEY = "{realtime-dispatch}:presence:replicas"
"""Replica id → when its heartbeat expires (a sorted set)."""


def presence_key(user_id: Key) -> str:
    return f"realtime-dispatch:presence:{{{user_id}}}"


def replica_users_key(replica_id: str) -> str:
    """The users a replica holds online (a set)."""
    return f"realtime-dispatch:presence-replica:{{{replica_id}}}"


def sweep_key(replica_id: str) -> str:
    return f"realtime-dispatch:presence-sweep:{{{replica_id}}}"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _key(value: object, keys: KeyCodec) -> Key | None:
    """A user id as this store spells it in a replica's set (``str(key)``), back to the key."""
    return parse_key(_text(value), keys)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


class RedisPresenceStore:
    def __init__(
        self,
        client: aioredis.Redis | RedisCluster,
        *,
        replica_id: str,
        refresh: float,
        keys: KeyCodec = UUID_KEYS,
    ) -> None:
        self._client = client
        self._keys = keys
        self.replica_id = replica_id
        self._field = f"r:{replica_id}"
        self._users = replica_users_key(replica_id)
        self.refresh = refresh
        self._ttl = 3 * refresh
        self._online = client.register_script(_ONLINE)
        self._offline = client.register_script(_OFFLINE)

    async def went_online(self, users: Sequence[Key]) -> dict[Key, str | None]:
        """Claim each user for this replica; those nobody else held, with their last
        ``lastSeenAt`` (None if unknown): they are to be announced online."""
        now = time.time()
        args = (self._field, now + self._ttl, now, SEEN_TTL)
        answers = await self._run(self._online, [([presence_key(u)], args) for u in users])
        await self._listed(b"SADD", users)
        fresh: dict[Key, str | None] = {}
        for user, (was, seen) in zip(users, answers, strict=True):
            if not int(was):
                fresh[user] = _text(seen) or None
        return fresh

    async def went_offline(self, users: Sequence[tuple[Key, str]]) -> list[Key]:
        """Drop this replica's claims (``lastSeenAt`` given); the users nobody holds now: they
        are to be announced offline."""
        now = time.time()
        answers = await self._run(
            self._offline,
            [([presence_key(u)], (self._field, now, seen, SEEN_TTL)) for u, seen in users],
        )
        await self._listed(b"SREM", [u for u, _ in users])
        return [u for (u, _), gone in zip(users, answers, strict=True) if int(gone)]

    async def _listed(self, command: bytes, users: Sequence[Key]) -> None:
        """Add users to (``SADD``) or remove them from (``SREM``) this replica's set."""
        for start in range(0, len(users), REFRESH_CHUNK):
            chunk = [str(u) for u in users[start : start + REFRESH_CHUNK]]
            if chunk:
                await self._client.execute_command(command.decode(), self._users, *chunk)

    async def sweep(self) -> list[tuple[Key, str]]:
        """Take the sweep of each replica whose heartbeat expired and drop its claims; the users
        nobody holds any more, with the dead replica's last heartbeat as ``lastSeenAt``."""
        now = time.time()
        dead: list[Any] = await self._client.zrangebyscore(
            REPLICAS_KEY, "-inf", now, withscores=True
        )
        gone: list[tuple[Key, str]] = []
        for member, expired_at in dead:
            replica = _text(member)
            if replica == self.replica_id:
                continue
            if not await self._client.set(sweep_key(replica), self.replica_id, nx=True, ex=60):
                continue  # another replica sweeps it
            seen = _iso(float(expired_at) - self._ttl)
            listed = await self._client.smembers(replica_users_key(replica))
            users = [u for u in (_key(m, self._keys) for m in listed) if u is not None]
            field = f"r:{replica}"
            answers = await self._run(
                self._offline,
                [([presence_key(u)], (field, now, seen, SEEN_TTL)) for u in users],
            )
            gone += [(u, seen) for u, left in zip(users, answers, strict=True) if int(left)]
            await self._client.delete(replica_users_key(replica))
            await self._client.zrem(REPLICAS_KEY, replica)
        return gone

    async def _run(
        self, script: Any, calls: list[tuple[list[str], tuple[object, ...]]]
    ) -> list[Any]:
        """A script's calls, answers in order: pipelined on one Redis, a few at a time on a
        cluster (each key its own slot)."""
        if isinstance(self._client, RedisCluster):
            return await _bounded(script(keys=keys, args=args) for keys, args in calls)
        answers: list[Any] = []
        for start in range(0, len(calls), REFRESH_CHUNK):
            async with self._client.pipeline(transaction=False) as pipe:
                for keys, args in calls[start : start + REFRESH_CHUNK]:
                    await script(keys=keys, args=args, client=pipe)  # queued
                answers += await pipe.execute()
        return answers

    async def keep(self, users: Iterable[Key]) -> None:
        """Rewrite this replica's claims on ``users`` (its online users), pipelined."""
        listed = list(users)
        expires = time.time() + self._ttl
        await self._client.zadd(REPLICAS_KEY, {self.replica_id: expires})
        await self._listed(b"SADD", listed)  # again: the set may have been lost with Redis
        for start in range(0, len(listed), REFRESH_CHUNK):
            async with self._client.pipeline(transaction=False) as pipe:
                # No EXPIRE: the transitions set the key's lifetime; a key that outlived it
                # while its user stayed online is written again here, and given one at the
                # user's next transition.
                for user in listed[start : start + REFRESH_CHUNK]:
                    pipe.hset(presence_key(user), self._field, expires)
                await pipe.execute()

    async def states(self, users: Sequence[Key]) -> dict[Key, tuple[bool, str | None]]:
        """``(online, lastSeenAt)`` of each user, cluster-wide."""
        if not users:
            return {}
        async with self._client.pipeline(transaction=False) as pipe:
            for user in users:
                pipe.hgetall(presence_key(user))
            answers: list[Any] = await pipe.execute()
        now = time.time()
        states: dict[Key, tuple[bool, str | None]] = {}
        for user, fields in zip(users, answers, strict=True):
            values = {_text(k): _text(v) for k, v in fields.items()}
            seen = values.pop("seen", None)
            online = any(float(expiry) > now for expiry in values.values())
            states[user] = (online, seen)
        return states


async def _bounded(calls: Iterable[Any]) -> list[Any]:
    """Await script calls, at most :data:`CONCURRENT` at once, answers in order."""
    gate = asyncio.Semaphore(CONCURRENT)

    async def one(call: Any) -> Any:
        async with gate:
            return await call

    return list(await asyncio.gather(*(one(c) for c in calls)))
