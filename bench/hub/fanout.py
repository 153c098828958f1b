"""Hub fan-out benchmark: one hub process, WebSocket clients in another process.

    python -m bench.hub.fanout [--clients 2000] [--members 100] [--pushes 3000] [--runs 3]

1. Starts the hub (``run_hub``) in a subprocess on a free port, against a fresh database
   (``--dsn``, default ``REALTIME_DATABASE_URL`` or the local server) with one chat of
   ``--members`` users.
2. Starts the clients process: ``--clients`` WebSocket connections (JSON protocol, token in the
   ``Authorization`` header, no negotiate); the first ``--members`` are the chat's members.
3. Reports the hub's RSS before and after the clients connected (memory per idle connection),
   and again after holding them idle for ``--hold`` seconds (flat memory).
4. Fan-out: the driver POSTs ``--pushes`` pushes to ``chat:{id}`` through the HTTP push endpoint
   (``--concurrency`` requests in flight) and measures until every member has every record:
   delivered frames/s = pushes × members / elapsed. Repeated ``--runs`` times; prints a JSON
   summary with the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from bench._common import module_command, parse_with_smoke
from support.databases import with_database
from support.hub_wire import RS, make_token
from support.procs import cpu_seconds, free_port, rss_kib

SECRET = "bench-secret-bench-secret-bench-secret!"
SERVICE_KEY = "bench-service-key"
NAMESPACE = uuid.UUID("6f1d7c1e-6d3a-4b7e-9a51-1f5c2b3d4e5f")
MSGPACK_INVOCATIONS = (b"\x96\x01\x80\xc0", b"\x95\x01\x80\xc0")
"""How a MessagePack invocation from the hub starts: [1, {}, nil, …] as six elements (stream ids
last, as the hub writes it) or five (as it wrote it before, and as the protocol allows); pings
are [6]."""


def user_id(index: int) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"user-{index}")


# --- hub process ------------------------------------------------------------------------------


def http_limits_off() -> dict[str, Any]:
    """No per-address cap: every client of the benchmark connects from 127.0.0.1. (Empty on a
    version without the HTTP limits, so the same script measures before and after.)"""
    try:
        from realtime_dispatch.edge.http_protocol import HttpLimits
    except ImportError:
        return {}
    return {"http_limits": HttpLimits(max_per_client=0)}


def hub_main(args: argparse.Namespace) -> None:
    import uvloop

    from realtime_dispatch.hub import HubOptions
    from realtime_dispatch.hub.serving.server import run_hub
    from realtime_dispatch.telemetry.logs import configure_logging

    configure_logging("warning")
    options = HubOptions(jwt_secret=SECRET, service_key=SERVICE_KEY)
    run = run_hub(
        options,
        host="127.0.0.1",
        port=args.port,
        dsn=args.dsn,
        log_level="warning",
        **http_limits_off(),
    )
    uvloop.run(run)  # as the CLI runs it


# --- clients process --------------------------------------------------------------------------


async def clients_main(args: argparse.Namespace) -> None:
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.exceptions import ConnectionClosed

    url = f"ws://127.0.0.1:{args.port}/hubs/messenger"
    socketio = args.protocol == "socketio"
    centrifuge = args.protocol == "centrifuge"

    def speaks_msgpack(index: int) -> bool:  # "mixed": every other client
        return args.protocol == "messagepack" or (args.protocol == "mixed" and index % 2 == 1)

    received = [0] * args.clients
    target = 0
    done = asyncio.Event()
    total = 0
    # Connections the server ended (a slow consumer's, say): reported at once rather than
    # waited for, since its frames will never come.
    ended: list[dict[str, Any]] = []
    stopping = False

    def token(index: int) -> str:
        return make_token(user_id(index), ttl=3600, secret=SECRET)

    async def run_client(index: int, ready: asyncio.Event) -> None:
        nonlocal total
        # the first --members clients say so (peer servers of bench/hub/peers.py read it)
        member = index < args.members
        if socketio:
            address = f"ws://127.0.0.1:{args.port}/socket.io/?EIO=4&transport=websocket"
            address += "&member=1" if member else ""
        elif centrifuge:
            address = f"ws://127.0.0.1:{args.port}/connection/websocket"
        else:
            address = url + ("?member=1" if member else "")
        async with connect(
            address,
            additional_headers={"Authorization": f"Bearer {token(index)}"},
            ping_interval=None,
            max_size=None,
            compression=None,
        ) as ws:
            if socketio:  # engine.io open packet, then connect to the default namespace
                assert str(await ws.recv()).startswith("0{")
                await ws.send("40")
                assert str(await ws.recv()).startswith("40")
                marks: tuple[str, ...] | tuple[bytes, ...] = ('42["message_received",',)
            elif centrifuge:  # Centrifuge's JSON protocol: connect, and members subscribe
                await ws.send('{"id":1,"method":0,"params":{}}')
                assert str(await ws.recv()).startswith('{"id":1,"result":')
                if member:
                    await ws.send('{"id":2,"method":1,"params":{"channel":"chat"}}')
                    assert str(await ws.recv()).startswith('{"id":2,"result":')
                marks = ('{"result":{"channel":"chat",',)  # publications; replies are not counted
            elif speaks_msgpack(index):
                await ws.send('{"protocol":"messagepack","version":1}' + RS)
                assert await ws.recv() == b"{}" + RS.encode()
                marks = MSGPACK_INVOCATIONS
            else:
                await ws.send('{"protocol":"json","version":1}' + RS)
                assert await ws.recv() == "{}" + RS
                marks = ('{"type":1,',)  # invocations; pings are not counted
            ready.set()
            keepalive = None if socketio else asyncio.create_task(ping(ws, speaks_msgpack(index)))
            last: str | bytes = ""
            try:
                async for frame in ws:
                    count = 0
                    for mark in marks:  # a MessagePack invocation has two forms
                        count += frame.count(mark)  # type: ignore[arg-type]
                    if count:
                        received[index] += count
                        total += count
                        if target and total >= target:
                            done.set()
                    elif socketio and frame == "2":  # the server's ping
                        await ws.send("3")
                    else:
                        last = frame
            except ConnectionClosed:
                pass
            finally:
                if keepalive is not None:
                    keepalive.cancel()
            if not stopping:
                ended.append(
                    {
                        "client": index,
                        "member": member,
                        "received": received[index],
                        "close_code": ws.close_code,
                        "close_reason": ws.close_reason,
                        "last_frame": repr(last[-200:]),
                    }
                )
                done.set()

    async def ping(ws: ClientConnection, binary: bool) -> None:
        sent = 2
        while True:
            await asyncio.sleep(10)
            if centrifuge:  # its PING command (7); the replies are not counted
                sent += 1
                await ws.send(f'{{"id":{sent},"method":7}}')
            else:
                await ws.send(b"\x02\x91\x06" if binary else '{"type":6}' + RS)

    tasks = []
    gate = asyncio.Semaphore(100)
    for index in range(args.clients):
        ready = asyncio.Event()
        async with gate:
            tasks.append(asyncio.create_task(run_client(index, ready)))
            await asyncio.wait_for(ready.wait(), 30)
    print(json.dumps({"event": "connected", "clients": args.clients}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        command = json.loads(line)
        if command["expect"] and not ended:
            done.clear()
            target = total + command["expect"]
            await done.wait()
        members, others = received[: args.members], received[args.members :]
        counts = {"member_min": min(members), "member_max": max(members), "others": sum(others)}
        if ended:
            report = {"event": "closed", "total": total, "count": len(ended), "ended": ended[:3]}
            print(json.dumps(report), flush=True)
        else:
            print(json.dumps({"event": "received", "total": total, **counts}), flush=True)
    stopping = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# --- driver -----------------------------------------------------------------------------------


async def prepare_database(dsn: str, members: int) -> tuple[str, uuid.UUID]:
    import asyncpg

    from realtime_dispatch.messenger.commands import create_chat
    from realtime_dispatch.messenger.schema import migrate

    name = f"rd_bench_hub_{os.getpid()}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    bench_dsn = with_database(dsn, name)  # keeps a query (a unix socket dir) intact
    conn = await asyncpg.connect(bench_dsn)
    try:
        await migrate(conn)
        chat = await create_chat(
            conn,
            creator=user_id(0),
            title="bench",
            members=[user_id(i) for i in range(1, members)],
        )
    finally:
        await conn.close()
    return bench_dsn, chat


async def drop_database(dsn: str, bench_dsn: str) -> None:
    import asyncpg

    admin = await asyncpg.connect(dsn)
    try:
        name = urlsplit(bench_dsn).path.lstrip("/")
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def wait_http(port: int) -> None:
    import httpx

    async with httpx.AsyncClient() as http:
        for _ in range(200):
            try:
                if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("hub did not become ready")


async def fanout_run(
    port: int,
    chat: uuid.UUID,
    pushes: int,
    concurrency: int,
    batch: int = 1,
    *,
    mark: Any = None,
) -> float:
    """POST ``pushes`` to the chat, ``concurrency`` requests in flight: one push per request
    (``batch`` 1, the one-push form), or ``batch`` pushes per request through the worker's
    :class:`HttpHubPublisher` (the batch form), with the tokens ``mark`` holds then (a
    :class:`~realtime_dispatch.delivery.marks.MembershipMark`, or None: no marks)."""
    import httpx

    from realtime_dispatch.delivery.push import Push
    from realtime_dispatch.dispatch.http_publisher import HttpHubPublisher

    url = f"http://127.0.0.1:{port}"
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(0, pushes, batch):
        queue.put_nowait(n)
    if batch > 1:
        publisher = HttpHubPublisher(url, SERVICE_KEY)
        group = f"chat:{chat}"

        async def batch_sender() -> None:
            while not queue.empty():
                start = queue.get_nowait()
                items = [
                    Push(group, "message_received", {"chatId": str(chat), "seq": n})
                    for n in range(start, min(start + batch, pushes))
                ]
                marks = () if mark is None else mark.tokens
                results = await publisher.publish(items, marks=marks)
                if any(result is not None for result in results):
                    raise SystemExit(f"push failed: {results}")

        try:
            await asyncio.gather(*(batch_sender() for _ in range(concurrency)))
        finally:
            await publisher.aclose()
        return time.perf_counter()
    body = {"target": "message_received", "arguments": [{"chatId": str(chat), "seq": 0}]}
    headers = {"Authorization": f"Bearer {SERVICE_KEY}"}
    path = f"/api/v1/hubs/messenger/groups/chat:{chat}"
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:

        async def sender() -> None:
            while not queue.empty():
                n = queue.get_nowait()
                body["arguments"][0]["seq"] = n  # type: ignore[index]
                response = await http.post(path, json=body)
                response.raise_for_status()

        await asyncio.gather(*(sender() for _ in range(concurrency)))
    return time.perf_counter()


def check_received(line: bytes, server: str) -> None:
    """The clients' answer to an ``expect``: every frame arrived, or the run ends here with why
    (the server closed connections that fell behind: a run too long for one clients process)."""
    event = json.loads(line)
    if event["event"] == "closed":
        first = event["ended"][0]
        raise SystemExit(
            f"{server}: the server closed {event['count']} client connection(s) mid-run"
            f" (close code {first['close_code']}, last frame {first['last_frame']}): the"
            " clients process fell behind; fewer pushes per run keep it up"
        )
    assert event["event"] == "received", line


async def stop_clients(clients: asyncio.subprocess.Process) -> None:
    """End the clients process: close its stdin, wait for it, kill it if it hangs."""
    if clients.stdin is not None:
        clients.stdin.close()
    try:
        await asyncio.wait_for(clients.wait(), 20)
    except TimeoutError:
        clients.kill()
        await clients.wait()


async def driver(args: argparse.Namespace) -> dict[str, Any]:
    dsn = args.dsn or os.environ.get(
        "REALTIME_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    bench_dsn, chat = await prepare_database(dsn, args.members)
    port = free_port()
    me = module_command(__spec__.name)
    hub = await asyncio.create_subprocess_exec(*me, "hub", "--port", str(port), "--dsn", bench_dsn)
    clients = None
    try:
        await wait_http(port)
        await asyncio.sleep(0.5)
        rss_before = rss_kib(hub.pid)
        clients = await asyncio.create_subprocess_exec(
            *me,
            "clients",
            "--port",
            str(port),
            "--clients",
            str(args.clients),
            "--members",
            str(args.members),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert clients.stdout is not None
        assert clients.stdin is not None
        started = time.perf_counter()
        line = await asyncio.wait_for(clients.stdout.readline(), 180)
        assert json.loads(line)["event"] == "connected", line
        connect_seconds = time.perf_counter() - started
        await asyncio.sleep(1.0)
        rss_connected = rss_kib(hub.pid)
        await asyncio.sleep(args.hold)
        rss_held = rss_kib(hub.pid)
        rates, hub_cpu, client_cpu, driver_cpu = [], [], [], []
        for _ in range(args.runs):
            hub_cpu0, client_cpu0 = cpu_seconds(hub.pid), cpu_seconds(clients.pid)
            driver_cpu0 = time.process_time()
            expect = args.pushes * args.members
            clients.stdin.write(json.dumps({"expect": expect}).encode() + b"\n")
            await clients.stdin.drain()
            t0 = time.perf_counter()
            await fanout_run(port, chat, args.pushes, args.concurrency)
            line = await asyncio.wait_for(clients.stdout.readline(), 300)
            elapsed = time.perf_counter() - t0
            check_received(line, "hub")
            rates.append(expect / elapsed)
            hub_cpu.append((cpu_seconds(hub.pid) - hub_cpu0) / elapsed)
            client_cpu.append((cpu_seconds(clients.pid) - client_cpu0) / elapsed)
            driver_cpu.append((time.process_time() - driver_cpu0) / elapsed)
            await asyncio.sleep(0.5)
        rss_after = rss_kib(hub.pid)
        return {
            "clients": args.clients,
            "members": args.members,
            "pushes_per_run": args.pushes,
            "connect_seconds": round(connect_seconds, 2),
            "hub_rss_mib_before": round(rss_before / 1024, 1),
            "hub_rss_mib_connected": round(rss_connected / 1024, 1),
            "hub_rss_mib_after_hold": round(rss_held / 1024, 1),
            "hub_rss_mib_after_fanout": round(rss_after / 1024, 1),
            "kib_per_idle_connection": round((rss_connected - rss_before) / args.clients, 1),
            "frames_per_second_runs": [round(r) for r in rates],
            "frames_per_second_median": round(statistics.median(rates)),
            "hub_cpu_utilisation_median": round(statistics.median(hub_cpu), 2),
            "clients_cpu_utilisation_median": round(statistics.median(client_cpu), 2),
            "driver_cpu_utilisation_median": round(statistics.median(driver_cpu), 2),
        }
    finally:
        if clients is not None:
            await stop_clients(clients)
        hub.terminate()
        await hub.wait()
        await drop_database(dsn, bench_dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", nargs="?", default="driver", choices=["driver", "hub", "clients"])
    parser.add_argument("--dsn")
    parser.add_argument("--port", type=int)
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--pushes", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--protocol",
        choices=["hub", "messagepack", "mixed", "socketio", "centrifuge"],
        default="hub",
        help="what the clients speak: the JSON or the MessagePack hub protocol, every other "
        "client MessagePack (mixed), socket.io, or Centrifuge's JSON protocol",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hold", type=float, default=5.0)
    smoke = {"clients": 40, "members": 10, "pushes": 100, "runs": 1, "hold": 0.5}
    args = parse_with_smoke(parser, smoke)
    if args.mode == "hub":
        hub_main(args)
    elif args.mode == "clients":
        asyncio.run(clients_main(args))
    else:
        print(json.dumps(asyncio.run(driver(args)), indent=2))


if __name__ == "__main__":
    main()
