"""``realtime-dispatch serve`` as a real process, driven like the README's curl session: REST
creates a chat and sends a message, a real WebSocket client receives both (the chat's creation
as ``chat_updated``) over the hub; a call
invite carries media join tokens minted from the development secrets ``serve`` generated (and
announced); none of the tokens, credentials or secrets, and no message body, reach the logs."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from pathlib import Path
from uuid import UUID, uuid4

import httpx
import jwt
import orjson
import pytest

from support.hub_wire import make_token
from support.procs import cli_env, free_port, start_cli, stop
from tests.hub_fixtures import RunningHub, raw_client

pytestmark = pytest.mark.e2e

BODY = "a private message body 7f3a"


async def _collect(stream: asyncio.StreamReader, into: list[str]) -> None:
    while line := await stream.readline():
        into.append(line.decode(errors="replace"))


async def test_serve_rest_hub_and_media_with_dev_secrets(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_DATA_DIR=str(tmp_path),
        REALTIME_DEV="true",
        REALTIME_LOG_LEVEL="debug",
        REALTIME_DISPATCH_POLLING_INTERVAL="0.2",
        REALTIME_MEDIA_TURN_URLS="turn:127.0.0.1:3478",
    )
    proc = await start_cli("serve", "--port", str(port), env=env)
    assert proc.stdout is not None
    assert proc.stderr is not None
    out: list[str] = []
    readers = [
        asyncio.create_task(_collect(proc.stdout, out)),
        asyncio.create_task(_collect(proc.stderr, out)),
    ]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            async with asyncio.timeout(30):
                while True:
                    try:
                        if (await http.get("/readyz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    assert proc.returncode is None, "".join(out)
                    await asyncio.sleep(0.05)
            announced = "".join(out)
            assert "REALTIME_MEDIA_JITSI_APP_SECRET" in announced
            assert "REALTIME_MEDIA_TURN_SECRET" in announced
            secrets = orjson.loads((tmp_path / "dev-secrets.json").read_bytes())
            hub_secret = secrets["hub_jwt_secret"]
            alice, bob = uuid4(), uuid4()

            def auth(user: UUID) -> dict[str, str]:
                return {"Authorization": f"Bearer {make_token(user, secret=hub_secret)}"}

            assert (await http.get("/openapi.json")).json()["info"]["title"]
            running = RunningHub(hub=None, port=port, server=None)  # type: ignore[arg-type]
            token = make_token(bob, secret=hub_secret)
            async with raw_client(running, token, in_query=True) as client:
                r = await http.post(
                    "/api/chats",
                    json={"title": "t", "memberUserIds": [str(bob)]},
                    headers=auth(alice),
                )
                assert r.status_code == 201, r.text
                chat = r.json()["chatId"]
                # The new chat is pushed to its members at once (bob joined its group live).
                [created] = await client.invocations(1, within=10)
                assert created["target"] == "chat_updated"
                assert created["arguments"][0]["chatId"] == chat
                assert created["arguments"][0]["eventKind"] == "ChatCreated"
                assert created["arguments"][0]["actorUserId"] == str(alice)
                r = await http.post(
                    f"/api/chats/{chat}/messages", json={"body": BODY}, headers=auth(alice)
                )
                assert r.status_code == 201
                [event] = await client.invocations(1, within=10)
                assert event["target"] == "message_received"
                assert event["arguments"][0]["body"] == BODY
                assert event["arguments"][0]["seq"] == r.json()["seq"]

                r = await http.post(
                    "/api/calls", json={"calleeUserId": str(bob)}, headers=auth(alice)
                )
                assert r.status_code == 201
                [invite] = await client.invocations(1, within=10)
            # The same token in the upgrade's Authorization header, and on negotiate: neither
            # may reach the debug log (uvicorn's WebSocket protocol logs request headers).
            carol_token = make_token(uuid4(), secret=hub_secret)
            async with raw_client(running, carol_token) as header_client:
                assert header_client is not None
            negotiated = await http.post(
                "/hubs/messenger/negotiate?negotiateVersion=1",
                headers={"Authorization": f"Bearer {carol_token}"},
            )
            assert negotiated.status_code == 200
            rest_token = auth(alice)["Authorization"].removeprefix("Bearer ")
        assert invite["target"] == "call_invited"
        media = invite["arguments"][0]["media"]
        claims = jwt.decode(
            media["accessToken"],
            secrets["media_jitsi_app_secret"],
            algorithms=["HS256"],
            audience="jitsi",
        )
        assert claims["room"] == media["roomName"]
        assert claims["context"] == {"user": {"id": str(bob)}}
        [ice] = media["iceServers"]
        assert ice["urls"] == ["turn:127.0.0.1:3478"]
        assert ice["username"] == f"{claims['exp']}:{bob}"
        digest = hmac.new(
            secrets["media_turn_secret"].encode(), ice["username"].encode(), hashlib.sha1
        ).digest()
        assert ice["credential"] == base64.b64encode(digest).decode()
    finally:
        code = await stop(proc)
        await asyncio.gather(*readers)
    assert code == 0, "".join(out)
    logs = "".join(out)
    assert '"event": "dispatched"' in logs or '"event":"dispatched"' in logs  # debug logs on
    leaked = {
        "access token": media["accessToken"],
        "token signature": media["accessToken"].rsplit(".", 1)[1],
        "turn credential": ice["credential"],
        "jitsi secret": secrets["media_jitsi_app_secret"],
        "turn secret": secrets["media_turn_secret"],
        "hub token": token,
        "hub token in a header": carol_token,
        "hub token's signature": carol_token.rsplit(".", 1)[1],
        "REST token": rest_token,
        "message body": BODY,
    }
    assert [name for name, value in leaked.items() if value in logs] == []
