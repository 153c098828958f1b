"""Typing and presence on one hub, in this process, against a push:

    python -m bench.hub.signals [--members 10,100] [--signals 2000] [--runs 3]
                                [--connections 15000] [--watch 50] [--storm 5000]

Every connection is a real :class:`~realtime_dispatch.hub.connections.connection.HubConnection`
registered with a real :class:`~realtime_dispatch.hub.Hub` (its registry, its typing and presence),
its transport one that discards what it is given: what is measured is the hub's own CPU, without the
kernel's send and without clients (as ``bench/hub/peers.py fanout``). No PostgreSQL and no Redis:
the "shares a chat" query's answer is served from memory (the chats the benchmark built), and
presence runs in process (the state a replica keeps; the Redis store adds one script call per
transition, see docs/hub.md).

1. **user_typing against a push** (``--members`` per chat, one of them typing): CPU per
   delivery of ``Typing`` (check, gate, payload, fan-out to the other members) and of one push of
   a ``message_received`` record to the same group through ``Hub.send_to_groups``, one per call
   as a typing signal goes; also a typing signal received from the backplane (the envelope
   opened, the typist left out).
2. **Presence at scale**: ``--connections`` users, one connection each, in overlapping chats
   of 75 (each user in 3), each connection watching the ``--watch`` users after it (all share a
   chat with it): RSS and CPU per watch (``WatchPresence`` through the hub method).
3. **A reconnect storm**: ``--storm`` users' connections close and new ones open (their chats
   joined, their ``WatchPresence`` made again): CPU per user when they are back inside the
   grace (no presence flip), and CPU per flip and per ``presence_changed`` delivered when they
   went offline and came back after it (each of them watched by ``--watch`` connections).

4. **The Redis presence store** (``--redis``, on a private ``redis-server``): hub and Redis CPU
   per user going online, per claim refreshed, per user going offline, and per user of a dead
   replica swept.

Prints a table per part and writes ``bench/results/hub_signals-*.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
import uuid
from typing import Any

from bench._common import (
    machine,
    null_connection,
    parse_with_smoke,
    print_table,
    quiet_production_logging,
    write_json,
)
from realtime_dispatch.hub import Hub, HubOptions
from realtime_dispatch.hub.backplane.publishers import InProcessHubPublisher
from realtime_dispatch.hub.connections.connection import HubConnection, receive
from realtime_dispatch.hub.connections.registry import chat_group
from realtime_dispatch.hub.connections.session import CloseReason
from realtime_dispatch.hub.wire.framing import records_frame
from realtime_dispatch.hub.wire.protocol import (
    Invocation,
    MessageType,
    invocation_frame,
    push_record,
)
from realtime_dispatch.hub.wire.signal_envelope import encode_signal
from support.procs import rss_mib

CHAT_SIZE, CHAT_STEP = 75, 25
SEEN = "2026-12-01T10:00:00Z"


def cpu() -> float:
    return time.process_time()


# --- 1. typing against a push --------------------------------------------------------------------


def typing_vs_push(members: int, signals: int, runs: int, mix: str) -> dict[str, Any]:
    """CPU per delivery, same group, same protocols, runs alternating: ``Typing`` from the bytes
    of the client's invocation (the SDKs invoke it: a completion goes back) to the frames on
    the other members' transports and the completion on the typist's (written by the socket's
    drain when the hub queued it); a push from ``Hub.deliver`` (the entry of every push, its
    membership barrier passed by a mark already heard, as the worker's batches pass it) to the
    frames on every member's; the push's fan-out alone (``Hub.send_to_groups``); and a typing
    signal received from the backplane."""

    async def run() -> dict[str, Any]:
        # No database here: the reference messenger's block check (one query per pass of the
        # interval, docs/hub.md "Blocks") is not part of these figures.
        hub = Hub(
            HubOptions(typing_interval=1e-9, presence_blocks=False),
            pool=None,
            dsn="postgresql://unused/unused",
        )
        chat = uuid.uuid4()
        group = chat_group(chat)
        users = [uuid.uuid4() for _ in range(members)]
        conns = []
        for index, user in enumerate(users):  # the typist (index 0) speaks JSON
            msgpack = mix == "messagepack" or (mix == "mixed" and index % 2 == 1)
            made = null_connection(index, user, "messagepack" if msgpack else "json")
            hub.new_connection(made)
            hub.registry.join(made.connection_id, group)
            conns.append(made)
        typist = conns[0]
        typist._on_sent = hub.sent_counter()  # its completions count as a push's frames do
        typing = hub.signals.typing
        record = push_record(
            "message_received",
            b'{"chatId":"%s","messageId":"%s","seq":1,"senderUserId":"%s","kind":"Text",'
            b'"sentAt":"2026-12-01T10:00:00.123456Z","body":"See you at noon, the usual place?",'
            b'"eventId":"%s"}'
            % (
                str(chat).encode(),
                str(uuid.uuid4()).encode(),
                str(users[0]).encode(),
                str(uuid.uuid4()).encode(),
            ),
        )
        invocation = b'{"type":1,"invocationId":"7","target":"Typing","arguments":["%s"]}\x1e' % (
            str(chat).encode()
        )
        feed = hub.membership
        feed.ready.set()  # the feed is up and has heard the batch's mark
        feed._token_heard("bench-mark")
        marks = ("bench-mark",)
        pushed = ((group, record),)
        envelope = encode_signal("another-replica", str(users[0]), _typing_record(chat, users[0]))
        received = [(group, envelope)]
        names = ("typing", "push", "push_fanout", "typing_received")
        result: dict[str, list[float]] = {name: [] for name in names}
        typing_deliveries = signals * (members - 1)
        for _ in range(runs):
            t0 = cpu()
            for _ in range(signals):
                receive(typist, invocation)
                _drain(typist)
            result["typing"].append((cpu() - t0) / typing_deliveries * 1e6)
            t0 = cpu()
            for _ in range(signals):
                await hub.deliver(pushed, marks)
            result["push"].append((cpu() - t0) / (signals * members) * 1e6)
            t0 = cpu()
            deliveries = 0
            for _ in range(signals):
                deliveries += hub.send_to_groups(pushed)
            result["push_fanout"].append((cpu() - t0) / deliveries * 1e6)
            t0 = cpu()
            for _ in range(signals):
                typing.received(received)
            result["typing_received"].append((cpu() - t0) / typing_deliveries * 1e6)
        sent = hub.metrics.typing.labels("sent")._value.get()
        assert sent == signals * runs, sent
        return {
            "members": members,
            "mix": mix,
            **{
                f"{name}_cpu_us_per_delivery": round(statistics.median(values), 3)
                for name, values in result.items()
            },
            **{
                f"{name}_range": [round(min(values), 3), round(max(values), 3)]
                for name, values in result.items()
            },
        }

    return asyncio.run(run())


def _drain(connection: HubConnection) -> None:
    """Write what the connection queued for its writer, as the socket's drain does
    (``ws_direct.DirectWebSocket._drain``, without its loop callback): a completion queued
    costs its write too."""
    if connection.outbound.has_pending():
        records = connection.due()
        if records and connection.sink is not None:
            binary = connection.protocol.binary
            connection.sink.transport.write(records_frame(records, binary=binary))
            connection.wrote(len(records))


def _typing_record(chat: uuid.UUID, user: uuid.UUID) -> bytes:
    return invocation_frame(
        "user_typing",
        [{"chatId": str(chat), "userId": str(user), "expiresAt": "2026-12-01T10:00:02Z"}],
    )


# --- 2 and 3. presence -------------------------------------------------------------------------


def presence(connections: int, watch: int, storm: int) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        grace = 0.2
        hub = Hub(
            HubOptions(presence_grace=grace, presence_watch_limit=max(500, watch)),
            pool=None,
            dsn="postgresql://unused/unused",
        )
        users = [uuid.uuid4() for _ in range(connections)]
        chats_of: dict[uuid.UUID, set[uuid.UUID]] = {u: set() for u in users}
        for start in range(0, connections, CHAT_STEP):
            chat = uuid.uuid4()
            for user in users[start : start + CHAT_SIZE]:
                chats_of[user].add(chat)

        async def member_chats(ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, uuid.UUID]]:
            return [(u, c) for u in ids for c in chats_of.get(u, ())]

        hub._publisher = InProcessHubPublisher(hub.deliver)  # what __aenter__ sets, no Redis
        signals = hub.signals
        signals.presence.scope.member_chats = member_chats  # the query's answer, from memory
        signals.presence.scope.blockers = None
        by_user: dict[uuid.UUID, HubConnection] = {}

        def open_connection(index: int, user: uuid.UUID) -> HubConnection:
            made = null_connection(index, user)
            hub.new_connection(made)
            for chat in chats_of[user]:  # what the membership load does on connect
                hub.registry.join(made.connection_id, chat_group(chat))
            by_user[user] = made
            return made

        def watched_by(index: int) -> list[str]:
            # The users after it, limited to the chat windows it is in (all share one).
            return [str(users[(index + d) % connections]) for d in range(1, watch + 1)]

        async def watch_all(indexes: range | list[int]) -> None:
            presence_ = signals.presence
            for index in indexes:
                user = users[index]
                presence_.watch(
                    by_user[user],
                    Invocation(MessageType.INVOCATION, "WatchPresence", None, (watched_by(index),)),
                )
            while presence_._tasks:
                await asyncio.gather(*list(presence_._tasks))

        for index, user in enumerate(users):
            open_connection(index, user)
        await asyncio.sleep(0)
        await _drain_announcements(hub)
        gc.collect()
        rss_before = rss_mib(os.getpid())
        t0 = cpu()
        await watch_all(range(connections))
        watch_cpu = cpu() - t0
        gc.collect()
        rss_after = rss_mib(os.getpid())
        watches = signals.presence.watch_count
        wrapped = connections - watch  # the last ones watch around to the first (no shared chat)
        assert watches >= wrapped * watch, watches

        # A storm inside the grace: close and reopen, chats joined, watches made again.
        # Every k-th user, so that most of a stormer's watchers stay connected.
        every = max(2, connections // max(1, storm))
        stormers = list(range(0, connections, every))[:storm]
        flips_before = _flips(hub)
        t0 = cpu()
        for index in stormers:
            hub.finalize(by_user[users[index]], CloseReason.TRANSPORT_LOST)
        for index in stormers:
            open_connection(index, users[index])
        reconnect_cpu = cpu() - t0
        t0 = cpu()
        await watch_all(stormers)
        rewatch_cpu = cpu() - t0
        await asyncio.sleep(grace * 2)
        await _drain_announcements(hub)
        assert _flips(hub) == flips_before, "a reconnect inside the grace flipped presence"

        # A storm past the grace: offline, then online, announced to every watcher.
        sent_before = hub.metrics.sent_frames._value.get()
        t0 = cpu()
        for index in stormers:
            hub.finalize(by_user[users[index]], CloseReason.TRANSPORT_LOST)
        close_cpu = cpu() - t0
        await asyncio.sleep(grace * 2)  # the timers fire; the announcements go below
        t0 = cpu()
        await _drain_announcements(hub)
        offline_cpu = cpu() - t0
        t0 = cpu()
        for index in stormers:
            open_connection(index, users[index])
        await asyncio.sleep(0)
        await _drain_announcements(hub)
        online_cpu = cpu() - t0
        flips = _flips(hub) - flips_before
        delivered = hub.metrics.sent_frames._value.get() - sent_before
        assert flips == 2 * len(stormers), flips
        await signals.aclose()
        return {
            "connections": connections,
            "watch_per_connection": watch,
            "watches": watches,
            "rss_mib_before_watches": round(rss_before, 1),
            "rss_mib_after_watches": round(rss_after, 1),
            "bytes_per_watch": round((rss_after - rss_before) * 1024 * 1024 / watches, 1),
            "cpu_us_per_watch": round(watch_cpu / watches * 1e6, 2),
            "storm_users": len(stormers),
            "storm_in_grace_cpu_ms_per_user_reconnect": round(
                reconnect_cpu / len(stormers) * 1e3, 3
            ),
            "storm_in_grace_cpu_ms_per_user_rewatch": round(rewatch_cpu / len(stormers) * 1e3, 3),
            "storm_past_grace_flips": flips,
            "storm_past_grace_presence_changed_delivered": int(delivered),
            "storm_past_grace_close_cpu_ms": round(close_cpu * 1e3, 1),
            "storm_past_grace_offline_announce_cpu_ms": round(offline_cpu * 1e3, 1),
            "storm_past_grace_reopen_and_online_announce_cpu_ms": round(online_cpu * 1e3, 1),
            "cpu_us_per_presence_changed_delivered": round(
                (offline_cpu + online_cpu) / max(1, delivered) * 1e6, 2
            ),
        }

    return asyncio.run(run())


def _flips(hub: Hub) -> float:
    counter = hub.metrics.presence
    return counter.labels("online")._value.get() + counter.labels("offline")._value.get()


async def _drain_announcements(hub: Hub) -> None:
    """Run the presence task's work here (the hub is not entered: nothing runs by itself)."""
    await hub.signals.presence.state.drain()


# --- 4. the Redis presence store ---------------------------------------------------------------


def redis_store(users: int, online: int) -> dict[str, Any]:
    """The store's cost on a private ``redis-server``: ``online`` users going online (one
    script call each), the refresh of ``users`` claims, and the same users going offline;
    this process's CPU and the server's, per user."""
    from bench._common import private_redis
    from realtime_dispatch.hub.backplane.subscriber import redis_client
    from realtime_dispatch.hub.signals.presence_store import RedisPresenceStore
    from support.procs import cpu_seconds

    async def run(url: str, pid: int) -> dict[str, Any]:
        client = redis_client(url)
        try:
            store = RedisPresenceStore(client, replica_id="bench", refresh=10)
            everyone = [uuid.uuid4() for _ in range(users)]
            flipping = everyone[:online]
            await store.went_online(flipping[:10])  # scripts loaded
            costs: dict[str, float] = {}
            for name, work in (
                ("online", lambda: store.went_online(flipping)),
                ("refresh", lambda: store.keep(everyone)),
                (
                    "offline",
                    lambda: store.went_offline([(u, "2026-12-01T10:00:00Z") for u in flipping]),
                ),
            ):
                t0, r0, w0 = cpu(), cpu_seconds(pid), time.perf_counter()
                await work()
                wall = time.perf_counter() - w0
                count = users if name == "refresh" else online
                costs[f"{name}_hub_cpu_us_per_user"] = round((cpu() - t0) / count * 1e6, 2)
                costs[f"{name}_redis_cpu_us_per_user"] = round(
                    (cpu_seconds(pid) - r0) / count * 1e6, 2
                )
                costs[f"{name}_wall_ms"] = round(wall * 1e3, 1)
            # A replica holding the flipping users dies: its heartbeat expires, this one sweeps.
            from realtime_dispatch.hub.signals.presence_store import REPLICAS_KEY

            dead = RedisPresenceStore(client, replica_id="dead", refresh=10)
            await dead.went_online(flipping)
            await client.zadd(REPLICAS_KEY, {"dead": time.time() - 1})
            t0, r0, w0 = cpu(), cpu_seconds(pid), time.perf_counter()
            swept = await store.sweep()
            costs["sweep_wall_ms"] = round((time.perf_counter() - w0) * 1e3, 1)
            costs["sweep_hub_cpu_us_per_user"] = round((cpu() - t0) / online * 1e6, 2)
            costs["sweep_redis_cpu_us_per_user"] = round((cpu_seconds(pid) - r0) / online * 1e6, 2)
            assert len(swept) == online, len(swept)
            return {"users": users, "flipping": online, **costs}
        finally:
            await client.aclose()

    with private_redis() as (url, pid):
        return asyncio.run(run(url, pid))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="10,100")
    parser.add_argument("--mix", default="json,mixed", help="json, messagepack, mixed")
    parser.add_argument("--signals", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--connections", type=int, default=15_000)
    parser.add_argument("--watch", type=int, default=50)
    parser.add_argument("--storm", type=int, default=5000)
    parser.add_argument(
        "--redis",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also price the Redis presence store on a private redis-server",
    )
    args = parse_with_smoke(
        parser,
        {"members": "10", "signals": 100, "runs": 1, "connections": 300, "watch": 20, "storm": 100},
        argv,
    )
    quiet_production_logging()  # a disconnect logs a line, as in serve
    typing_rows = [
        typing_vs_push(int(m), args.signals, args.runs, mix)
        for mix in args.mix.split(",")
        for m in args.members.split(",")
    ]
    print_table(
        ["members", "mix", "typing", "push", "push fan-out alone", "typing received"],
        [
            [
                r["members"],
                r["mix"],
                r["typing_cpu_us_per_delivery"],
                r["push_cpu_us_per_delivery"],
                r["push_fanout_cpu_us_per_delivery"],
                r["typing_received_cpu_us_per_delivery"],
            ]
            for r in typing_rows
        ],
    )
    print("(CPU µs per delivery, medians of --runs)")
    presence_row = presence(args.connections, args.watch, args.storm)
    print_table(["measure", "value"], [[k, v] for k, v in presence_row.items()])
    store_row = redis_store(args.connections, args.storm) if args.redis else None
    if store_row is not None:
        print_table(["redis store", "value"], [[k, v] for k, v in store_row.items()])
    path = write_json(
        "hub_signals-smoke" if args.smoke else "hub_signals",
        {
            "machine": machine(),
            "args": vars(args),
            "typing": typing_rows,
            "presence": presence_row,
            "redis_store": store_row,
        },
    )
    print(f"written {path}")


if __name__ == "__main__":
    main()
