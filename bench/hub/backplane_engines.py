"""Backplane engines side by side: what each hub replica receives, and what a push costs.

Three hub replicas, each with the members of its own share of the groups, and one publisher
(the dispatcher) sending pushes to random groups, pipelined in batches as the dispatcher does:

* ``redis``: the single-channel backplane in format 1, one Redis, one pub/sub channel that every
  replica reads, one message per push (what versions before the batch format send);
* ``redis-batch``: the same through the project's own ``RedisHubPublisher`` and
  ``BackplaneSubscriber``: format 2, one message per dispatcher batch, decoded once per replica;
* ``redis-cluster``: a 3-node Redis Cluster, one sharded channel per group (``SSUBSCRIBE`` /
  ``SPUBLISH``); a replica subscribes to the groups that have members on it;
* ``nats``: a 3-node NATS cluster, one subject per group, each replica on its own node.

It starts its own servers (a ``redis-server`` on a free port and ``deploy/local-cluster.sh``),
so it needs Debian's redis-server, redis-tools and nats-server. Per engine and round it reports
pushes/s, the pushes each replica received, and CPU µs per push of the brokers and of this
process (publisher and the three subscribers). Medians of ``--runs`` alternating rounds.

    python -m bench.hub.backplane_engines [--groups 3000] [--pushes 30000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import nats
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from bench._common import machine, median_spread, parse_with_smoke, print_table, write_json
from support.procs import cpu_seconds, free_port

ROOT = Path(__file__).resolve().parents[2]
REPLICAS = 3
BATCH = 100
FRAME = b'{"type":1,"target":"message_received","arguments":[' + b"x" * 260 + b"]}\x1e"


def groups_for(count: int) -> list[str]:
    return [f"chat:{i:08d}-0000-4000-8000-000000000000" for i in range(count)]


def home(index: int) -> int:
    """The replica where a group's members are connected (chats spread evenly)."""
    return index % REPLICAS


def shard_channel(group: str) -> str:
    # The hash tag keeps one group's channel on one slot, whatever the prefix.
    return f"rd:{{{group}}}"


def nats_subject(group: str) -> str:
    return f"rd.hub.{group}"


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Counters:
    def __init__(self) -> None:
        self.received = [0] * REPLICAS
        self.done = asyncio.Event()
        self.expected = 0

    def hit(self, replica: int, count: int = 1) -> None:
        self.received[replica] += count
        if sum(self.received) >= self.expected:
            self.done.set()


Engine = Callable[[list[str], list[int], Counters], Awaitable[float]]


async def run_redis(url: str, groups: list[str], plan: list[int], counters: Counters) -> float:
    """Single Redis, one channel read by every replica (today's backplane)."""
    channel = "realtime-dispatch:hub:messenger"
    counters.expected = len(plan) * REPLICAS
    subscribers = [aioredis.Redis.from_url(url) for _ in range(REPLICAS)]
    readers = []
    for replica, client in enumerate(subscribers):
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(channel)
        readers.append(asyncio.create_task(_read_redis(pubsub, replica, counters)))
    publisher = aioredis.Redis.from_url(url)
    started = time.perf_counter()
    for chunk in _chunks(plan):
        async with publisher.pipeline(transaction=False) as pipe:
            for index in chunk:
                pipe.publish(channel, groups[index].encode() + b"\n" + FRAME)
            await pipe.execute()
    return await _finish(counters, started, readers, [publisher, *subscribers])


async def _read_redis(pubsub: Any, replica: int, counters: Counters) -> None:
    while True:
        message = await pubsub.get_message(timeout=1.0)
        if message is not None and message["type"] in ("message", "smessage"):
            counters.hit(replica)


async def run_redis_batch(
    url: str, groups: list[str], plan: list[int], counters: Counters
) -> float:
    """The project's publisher and subscribers: a batch per message (format 2)."""
    from realtime_dispatch.hub.backplane.publishers import RedisHubPublisher
    from realtime_dispatch.hub.backplane.subscriber import BackplaneSubscriber

    counters.expected = len(plan) * REPLICAS
    subscribers = []
    for replica in range(REPLICAS):

        async def deliver(
            items: Sequence[tuple[str, bytes]], _marks: object = (), replica: int = replica
        ) -> None:
            counters.hit(replica, len(items))

        subscribers.append(BackplaneSubscriber(url, deliver))
    readers = [asyncio.create_task(s.run()) for s in subscribers]
    for subscriber in subscribers:
        await asyncio.wait_for(subscriber.ready.wait(), 10)
    publisher = RedisHubPublisher(url)
    started = time.perf_counter()
    for chunk in _chunks(plan):
        results = await publisher.publish_frames([(groups[index], FRAME) for index in chunk])
        assert not any(results), results
    elapsed = await _finish(counters, started, readers, [])
    await publisher.aclose()
    return elapsed


async def run_redis_cluster(
    url: str, groups: list[str], plan: list[int], counters: Counters
) -> float:
    """Redis Cluster sharded pub/sub: a channel per group, each replica subscribes to its own."""
    counters.expected = len(plan)
    clusters = [RedisCluster.from_url(url) for _ in range(REPLICAS)]
    readers = []
    for replica, cluster in enumerate(clusters):
        await cluster.initialize()
        pubsub = cluster.pubsub()
        mine = [shard_channel(g) for i, g in enumerate(groups) if home(i) == replica]
        for start in range(0, len(mine), 500):
            await pubsub.ssubscribe(*mine[start : start + 500])
        # One reader per node connection: the cluster-wide reader polls the nodes in turn.
        readers += [
            asyncio.create_task(_read_redis(node_pubsub, replica, counters))
            for node_pubsub in pubsub.node_pubsub_mapping.values()
        ]
    publisher = RedisCluster.from_url(url)
    await publisher.initialize()
    started = time.perf_counter()
    for chunk in _chunks(plan):
        async with publisher.pipeline(transaction=False) as pipe:
            for index in chunk:
                pipe.spublish(shard_channel(groups[index]), FRAME)
            await pipe.execute()
    return await _finish(counters, started, readers, [publisher, *clusters])


async def run_nats(
    urls: list[str], groups: list[str], plan: list[int], counters: Counters
) -> float:
    """NATS cluster: a subject per group, each replica on its own node."""
    counters.expected = len(plan)
    subscribers = []
    ready = [asyncio.Event() for _ in range(REPLICAS)]
    for replica in range(REPLICAS):
        nc = await nats.connect(servers=[urls[replica]], pending_size=64 * 1024 * 1024)

        async def on_message(_msg: Any, replica: int = replica) -> None:
            counters.hit(replica)

        async def on_ready(_msg: Any, replica: int = replica) -> None:
            ready[replica].set()

        for i, group in enumerate(groups):
            if home(i) == replica:
                await nc.subscribe(nats_subject(group), cb=on_message)
        # Subscribed last: once a probe to it arrives from the publisher's node, the interest
        # in every group above (sent before it over the same route) has arrived there too.
        await nc.subscribe(f"bench.ready.{replica}", cb=on_ready)
        await nc.flush()
        subscribers.append(nc)
    publisher = await nats.connect(servers=[urls[0]], pending_size=64 * 1024 * 1024)
    await _until_routed(publisher, ready)
    started = time.perf_counter()
    for chunk in _chunks(plan):
        for index in chunk:
            await publisher.publish(nats_subject(groups[index]), FRAME)
        await publisher.flush()
    await asyncio.wait_for(counters.done.wait(), 120)
    elapsed = time.perf_counter() - started
    for nc in [publisher, *subscribers]:
        await nc.close()
    return elapsed


async def _until_routed(publisher: Any, ready: list[asyncio.Event], within: float = 60) -> None:
    """Probe each replica through the publisher's node until every one has answered: the
    subscription interest has then crossed the cluster's routes (a fixed sleep did not always
    cover it on a loaded machine, and pushes published before it were lost)."""
    deadline = time.monotonic() + within
    while not all(event.is_set() for event in ready):
        if time.monotonic() > deadline:
            raise TimeoutError("the NATS cluster did not route the subscriptions")
        for replica, event in enumerate(ready):
            if not event.is_set():
                await publisher.publish(f"bench.ready.{replica}", b"")
        await publisher.flush()
        await asyncio.sleep(0.05)


async def _finish(
    counters: Counters, started: float, readers: list[asyncio.Task[None]], clients: list[Any]
) -> float:
    """Wait for every expected delivery; the seconds since ``started``. Then clean up."""
    await asyncio.wait_for(counters.done.wait(), 120)
    elapsed = time.perf_counter() - started
    for task in readers:
        task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    for client in clients:
        await client.aclose()
    return elapsed


def _chunks(plan: Sequence[int]) -> list[Sequence[int]]:
    return [plan[i : i + BATCH] for i in range(0, len(plan), BATCH)]


def _pids(folder: Path, pattern: str) -> list[int]:
    return [int(p.read_text()) for p in folder.glob(pattern)]


class Servers:
    """A standalone redis-server and the local cluster, started for the run."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rd-bench-bp-"))
        self.cluster_dir = self.dir / "cluster"
        self.redis_port = free_port()
        self.redis: subprocess.Popen[bytes] | None = None
        self.env = dict(
            os.environ,
            # Below the ephemeral range, so nothing else picks them in between.
            REDIS_CLUSTER_PORT="21101",
            NATS_CLUSTER_PORT="24301",
            NATS_ROUTE_PORT="26301",
        )
        self.urls: dict[str, Any] = {}

    def start(self) -> None:
        self.redis = subprocess.Popen(
            [
                *("redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no"),
            ],
            stdout=subprocess.DEVNULL,
        )
        out = subprocess.run(
            [str(ROOT / "deploy/local-cluster.sh"), "start", str(self.cluster_dir)],
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        values = dict(line.split("=", 1) for line in out.split())
        self.urls = {
            "redis": f"redis://127.0.0.1:{self.redis_port}/0",
            "redis-batch": f"redis://127.0.0.1:{self.redis_port}/0",
            "redis-cluster": values["REALTIME_REDIS_CLUSTER_URL"],
            "nats": values["REALTIME_NATS_URL"].split(","),
        }

    def broker_pids(self, engine: str) -> list[int]:
        if engine in ("redis", "redis-batch"):
            return [self.redis.pid] if self.redis else []
        name = "redis-*/redis.pid" if engine == "redis-cluster" else "nats-*/nats.pid"
        return _pids(self.cluster_dir, name)

    def stop(self) -> None:
        subprocess.run(
            [str(ROOT / "deploy/local-cluster.sh"), "stop", str(self.cluster_dir)],
            env=self.env,
            check=False,
        )
        if self.redis is not None:
            self.redis.terminate()
            self.redis.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


async def one_round(
    servers: Servers, engine: str, groups: list[str], pushes: int
) -> dict[str, Any]:
    plan = [random.randrange(len(groups)) for _ in range(pushes)]
    counters = Counters()
    brokers = servers.broker_pids(engine)
    broker_before = sum(cpu_seconds(pid) for pid in brokers)
    own_before = self_cpu()
    url = servers.urls[engine]
    if engine == "redis":
        elapsed = await run_redis(url, groups, plan, counters)
    elif engine == "redis-batch":
        elapsed = await run_redis_batch(url, groups, plan, counters)
    elif engine == "redis-cluster":
        elapsed = await run_redis_cluster(url, groups, plan, counters)
    else:
        elapsed = await run_nats(url, groups, plan, counters)
    own = self_cpu() - own_before
    broker = sum(cpu_seconds(pid) for pid in brokers) - broker_before
    share = [sum(1 for i in plan if home(i) == r) for r in range(REPLICAS)]
    return {
        "pushes_per_s": pushes / elapsed,
        "received": counters.received,
        "own_share": share,
        "broker_us_per_push": broker / pushes * 1e6,
        "client_us_per_push": own / pushes * 1e6,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=3000)
    parser.add_argument("--pushes", type=int, default=30000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--engines", default="redis,redis-batch,redis-cluster,nats")
    args = parse_with_smoke(parser, {"groups": 100, "pushes": 1000, "runs": 1})
    engines = args.engines.split(",")
    groups = groups_for(args.groups)
    servers = Servers()
    results: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
    try:
        servers.start()
        for _ in range(args.runs):
            for engine in engines:
                results[engine].append(await one_round(servers, engine, groups, args.pushes))
    finally:
        servers.stop()
    rows = []
    summary: dict[str, Any] = {}
    for engine in engines:
        runs = results[engine]
        last = runs[-1]
        entry = {
            key: median_spread([r[key] for r in runs])
            for key in ("pushes_per_s", "broker_us_per_push", "client_us_per_push")
        }
        entry["received_per_replica"] = last["received"]
        entry["own_share_per_replica"] = last["own_share"]
        summary[engine] = entry
        rows.append(
            [
                engine,
                f"{entry['pushes_per_s']['median']:.0f}",
                " / ".join(str(n) for n in last["received"]),
                " / ".join(str(n) for n in last["own_share"]),
                f"{entry['broker_us_per_push']['median']:.1f}",
                f"{entry['client_us_per_push']['median']:.1f}",
            ]
        )
    print_table(
        [
            "engine",
            "pushes/s",
            "received per replica",
            "own share per replica",
            "broker µs/push",
            "client µs/push",
        ],
        rows,
    )
    path = write_json(
        "backplane_engines",
        {"machine": machine(), "args": vars(args), "results": summary, "runs": results},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
