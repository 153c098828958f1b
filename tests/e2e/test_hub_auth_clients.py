"""The official ``@microsoft/signalr`` client, in Node and in headless Chromium, against a real
hub whose tokens expire and whose users get revoked: at ``exp`` the hub closes the connection
with reconnect allowed, the client's ``accessTokenFactory`` hands it a fresh token and it goes on
receiving; ``realtime-dispatch revoke --user`` (a real process; in the browser test the same
SQL) cuts a connected user for good."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from playwright.async_api import async_playwright

from realtime_dispatch.auth import revocation_store
from realtime_dispatch.auth.tokens import mint_token
from realtime_dispatch.hub.connections.registry import user_group
from realtime_dispatch.hub.wire.protocols import Transport
from support.hub_wire import SECRET
from support.procs import cli_env, start_cli
from tests.e2e.test_ops_page import CHROMIUM, CHROMIUM_ARGS
from tests.hub_fixtures import NODE_TRANSPORTS, REPO, NodeClient, push

pytestmark = pytest.mark.e2e

RECONNECT_DELAYS = [0, 200, 500, 1000, 2000]


async def next_event(client: NodeClient, kinds: set[str]) -> dict[str, Any]:
    while True:
        event = await client.event(within=20)
        if event["event"] in kinds:
            return event


@pytest.mark.parametrize(("transport", "protocol"), NODE_TRANSPORTS)
async def test_node_client_reconnects_with_a_fresh_token_after_expiry(hub, transport, protocol):
    """On every transport and protocol: on long polling the close message at ``exp`` answers
    the client's waiting poll; a Server-Sent Events stream ends after it."""
    alice = uuid.uuid4()
    client = await NodeClient.start(
        f"{hub.http_url}/hubs/messenger",
        None,
        mint={"secret": SECRET, "user": str(alice), "ttls": [3, 300]},
        reconnect=RECONNECT_DELAYS,
        targets=["message_received"],
        transport=transport,
        protocol=protocol,
    )
    try:
        first = await next_event(client, {"token"})
        assert (await next_event(client, {"started", "start_failed"}))["event"] == "started"
        reconnecting = await next_event(client, {"reconnecting", "closed"})
        assert reconnecting["event"] == "reconnecting"
        assert "token expired" in reconnecting["error"]
        second = await next_event(client, {"token"})
        assert second["exp"] > first["exp"]
        assert (await next_event(client, {"reconnected", "closed"}))["event"] == "reconnected"
        [connection] = hub.hub.connections.values()
        assert connection.transport is Transport(transport)
        assert connection.identity.expires_at == second["exp"]
        await push(hub, user_group(alice), "message_received", {"seq": 1})
        message = await next_event(client, {"message"})
        assert message["args"] == [{"seq": 1}]
    finally:
        await client.stop()


async def test_node_client_of_a_revoked_user_is_cut(hub, database_url):
    alice = uuid.uuid4()
    token = mint_token(SECRET, alice, now=time.time() - 2)
    client = await NodeClient.start(
        f"{hub.http_url}/hubs/messenger", token, reconnect=RECONNECT_DELAYS
    )
    try:
        assert (await next_event(client, {"started", "start_failed"}))["event"] == "started"
        proc = await start_cli(
            "revoke", "--user", str(alice), env=cli_env(REALTIME_DATABASE_URL=database_url)
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, err
        assert out.decode().startswith(f"revoked {alice}")
        closed = await next_event(client, {"closed", "reconnecting"})
        assert closed["event"] == "closed"  # no reconnect attempt: the server said so
        assert "token revoked" in closed["error"]
        assert not hub.hub.connections
    finally:
        await client.stop()


BROWSER_PAGE = """
window.events = [];
window.startHub = async (url, delays) => {
  const connection = new signalR.HubConnectionBuilder()
    .withUrl(url, { accessTokenFactory: () => window.mintToken() })
    .withAutomaticReconnect(delays)
    .build();
  const note = (event) => events.push(event);
  connection.on("message_received", (payload) => note({ event: "message", payload }));
  connection.onreconnecting((error) => note({ event: "reconnecting", error: String(error) }));
  connection.onreconnected(() => note({ event: "reconnected" }));
  connection.onclose((error) => note({ event: "closed", error: String(error) }));
  await connection.start();
  note({ event: "started", transport: connection.connection.transport.constructor.name });
};
"""


async def test_browser_client_gets_a_fresh_token_after_expiry_and_is_cut_when_revoked(hub, pool):
    alice = uuid.uuid4()
    minted: list[tuple[str, int]] = []

    def mint() -> str:
        """An app's token cache: the same token until it expires, then a fresh one."""
        if not minted or minted[-1][1] <= time.time():
            ttl = 3 if not minted else 300
            token = mint_token(SECRET, alice, ttl=ttl)
            minted.append((token, int(time.time()) + ttl))
        return minted[-1][0]

    bundle = REPO / "node_modules" / "@microsoft" / "signalr" / "dist" / "browser" / "signalr.js"
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            # A page of the hub's own origin (a real loopback response, so Chromium's local
            # network checks let it open the WebSocket), with the client's browser bundle.
            await page.goto(f"{hub.http_url}/healthz")
            await page.expose_function("mintToken", mint)
            await page.add_script_tag(path=str(bundle))
            await page.add_script_tag(content=BROWSER_PAGE)
            await page.evaluate(
                "([url, delays]) => window.startHub(url, delays)",
                [f"{hub.http_url}/hubs/messenger", RECONNECT_DELAYS],
            )
            await page.wait_for_function(
                "() => events.some(e => e.event === 'reconnected' || e.event === 'closed')",
                timeout=20_000,
            )
            seen = await page.evaluate("() => events")
            kinds = [e["event"] for e in seen]
            assert kinds[:3] == ["started", "reconnecting", "reconnected"], seen
            assert seen[0]["transport"] == "WebSocketTransport"
            assert "token expired" in seen[1]["error"]
            assert len(minted) >= 2
            await push(hub, user_group(alice), "message_received", {"seq": 7})
            await page.wait_for_function(
                "() => events.some(e => e.event === 'message')", timeout=10_000
            )
            messages = [e for e in await page.evaluate("() => events") if e["event"] == "message"]
            assert messages == [{"event": "message", "payload": {"seq": 7}}]

            # Revoked: the page's connection is closed for good (no reconnect attempt).
            await revocation_store.revoke(pool, alice)
            await page.wait_for_function(
                "() => events.some(e => e.event === 'closed')", timeout=10_000
            )
            tail = (await page.evaluate("() => events"))[len(seen) + 1 :]
            assert [e["event"] for e in tail] == ["closed"], tail
            assert "token revoked" in tail[0]["error"]
        finally:
            await browser.close()
