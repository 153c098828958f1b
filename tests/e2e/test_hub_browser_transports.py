"""The official SignalR browser client in headless Chromium on the transports a browser falls
back to when WebSockets are blocked: Server-Sent Events (the native ``EventSource``, token in
the query) with JSON, and long polling with JSON and with MessagePack. One page, three users,
each forced onto one transport: pushes, live membership, a server close with reconnect
allowed, and pushes again after the reconnect."""

from __future__ import annotations

import uuid

import pytest
from playwright.async_api import async_playwright

from realtime_dispatch.hub.connections.registry import chat_group, user_group
from realtime_dispatch.hub.connections.session import CloseReason, CloseRequest
from realtime_dispatch.hub.wire.protocols import Transport
from realtime_dispatch.messenger.commands import create_chat, set_participant
from support.hub_wire import make_token
from support.procs import wait_until
from tests.e2e.test_ops_page import CHROMIUM, CHROMIUM_ARGS
from tests.hub_fixtures import REPO, hub_settings, push, running_hub

pytestmark = pytest.mark.e2e

BUNDLES = [
    REPO / "node_modules/@microsoft/signalr/dist/browser/signalr.js",
    REPO
    / "node_modules/@microsoft/signalr-protocol-msgpack/dist/browser/signalr-protocol-msgpack.js",
]
CASES = [("ServerSentEvents", "json"), ("LongPolling", "json"), ("LongPolling", "messagepack")]

CONNECT = """
async ([url, cases]) => {
  window.got = {};
  window.reconnected = {};
  for (const [name, transport, protocol, token] of cases) {
    window.got[name] = [];
    window.reconnected[name] = 0;
    let builder = new signalR.HubConnectionBuilder()
      .withUrl(url, {
        accessTokenFactory: () => token,
        transport: signalR.HttpTransportType[transport],
      })
      .withAutomaticReconnect([0, 200, 500, 1000])
      .configureLogging(signalR.LogLevel.Warning);
    if (protocol === "messagepack") {
      builder = builder.withHubProtocol(new signalR.protocols.msgpack.MessagePackHubProtocol());
    }
    const connection = builder.build();
    connection.on("message_received", (payload) => window.got[name].push(payload));
    connection.onreconnected(() => { window.reconnected[name] += 1; });
    await connection.start();
  }
}
"""


def _received(name: str, count: int) -> str:
    return f"window.got[{name!r}].length >= {count}"


async def test_browser_falls_back_to_sse_and_long_polling(database_url, pool):
    users = {f"{t}-{p}": uuid.uuid4() for t, p in CASES}
    async with running_hub(hub_settings(), dsn=database_url, pool=pool) as hub:
        async with pool.acquire() as conn:
            chat = await create_chat(conn, creator=uuid.uuid4(), title="t")
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page()
                await page.goto(f"{hub.http_url}/healthz")  # the hub's origin: no CORS
                for bundle in BUNDLES:
                    await page.add_script_tag(path=str(bundle))
                cases = [
                    [name, t, proto, make_token(users[name])]
                    for (t, proto), name in zip(CASES, users, strict=True)
                ]
                await page.evaluate(CONNECT, [f"{hub.http_url}/hubs/messenger", cases])
                by_user = {c.user_id: c for c in hub.hub.connections.values()}
                for (transport, protocol), user in zip(CASES, users.values(), strict=True):
                    assert by_user[user].transport is Transport(transport)
                    assert by_user[user].protocol.name == protocol

                for name, user in users.items():
                    await push(hub, user_group(user), "message_received", {"to": name})
                    await page.wait_for_function(_received(name, 1))

                # Live membership: all three join the chat after connecting.
                async with pool.acquire() as conn:
                    for user in users.values():
                        await set_participant(conn, chat_id=chat, user_id=user, active=True)
                await push(hub, chat_group(chat), "message_received", {"seq": 1})
                for name in users:
                    await page.wait_for_function(_received(name, 2))

                # Closed by the server, reconnect allowed: each comes back on its transport.
                old = set(hub.hub.connections.values())
                for connection in old:
                    connection.close(CloseRequest(CloseReason.SHUTDOWN, "restart", True))
                await page.wait_for_function(
                    "Object.values(window.reconnected).every((n) => n >= 1)"
                )
                await wait_until(lambda: len(hub.hub.connections) == len(users), within=10)
                assert not old & set(hub.hub.connections.values())
                await push(hub, chat_group(chat), "message_received", {"seq": 2})
                for name in users:
                    await page.wait_for_function(_received(name, 3))
                got = await page.evaluate("window.got")
                for name in users:
                    assert got[name] == [{"to": name}, {"seq": 1}, {"seq": 2}]
            finally:
                await browser.close()
