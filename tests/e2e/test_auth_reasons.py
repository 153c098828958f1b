"""A refused token is told why: ``realtime-dispatch hub`` answers 401 with
``WWW-Authenticate: Bearer error="invalid_token", error_description="…"`` naming the reason, on
negotiate, the WebSocket upgrade, the HTTP transports, REST (with and without a body), sync and
ops; a request without a token gets the bare ``Bearer`` challenge."""

from __future__ import annotations

import time
import uuid

import httpx
import jwt
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from support.procs import cli_env, free_port, start_cli, stop, wait_for_line

SECRET = "s" * 40
AUDIENCE = "talk"


def token(claims: dict[str, object], secret: str = SECRET) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


def reasons() -> dict[str, tuple[str, str]]:
    """name → (token, the error_description the hub must give)."""
    now = int(time.time())
    user = str(uuid.uuid4())
    good = {"sub": user, "aud": AUDIENCE, "exp": now + 600}
    return {
        "no exp": (token({"sub": user, "aud": AUDIENCE}), "token has no exp"),
        "expired": (token({**good, "exp": now - 600}), "token expired"),
        "bad signature": (token(good, "x" * 40), "token signature does not verify"),
        "wrong audience": (token({**good, "aud": "other"}), "wrong token audience"),
        "user claim not a key": (
            token({**good, "sub": "42"}),
            "user claim sub is not a user id (a UUID, lowercase and hyphenated)",
        ),
        "not a JWT": ("abc.def", "token is not a well-formed JWT"),
    }


def challenge(description: str) -> str:
    return f'Bearer error="invalid_token", error_description="{description}"'


@pytest.mark.e2e
async def test_every_entry_point_names_the_reason(database_url: str) -> None:
    port = free_port()
    env = cli_env(
        REALTIME_DATABASE_URL=database_url,
        REALTIME_HUB_JWT_SECRET=SECRET,
        REALTIME_HUB_JWT_AUDIENCE=AUDIENCE,
        REALTIME_HUB_SERVICE_KEY="k" * 32,
    )
    proc = await start_cli("hub", "--port", str(port), env=env)
    try:
        await wait_for_line(proc, b"listening on")
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base) as http:
            for name, (bad, description) in reasons().items():
                auth = {"Authorization": f"Bearer {bad}"}
                answers = {
                    "negotiate": await http.post(
                        "/hubs/messenger/negotiate?negotiateVersion=1", headers=auth
                    ),
                    "long polling": await http.get("/hubs/messenger?id=x", headers=auth),
                    "REST": await http.get("/api/chats", headers=auth),
                    "REST with a body": await http.post(
                        "/api/chats", headers=auth, json={"title": "t", "memberUserIds": []}
                    ),
                    "sync": await http.get("/api/sync", headers=auth),
                    "ops": await http.get("/ops/api/summary", headers=auth),
                }
                for where, answer in answers.items():
                    assert answer.status_code == 401, (name, where, answer.text)
                    got = answer.headers.get("www-authenticate")
                    assert got == challenge(description), (name, where, got)
                with pytest.raises(InvalidStatus) as refused:
                    async with connect(f"ws://127.0.0.1:{port}/hubs/messenger?access_token={bad}"):
                        pass
                response = refused.value.response
                assert response.status_code == 401, name
                assert response.headers.get("WWW-Authenticate") == challenge(description), name
            bare = await http.post("/hubs/messenger/negotiate?negotiateVersion=1")
            assert (bare.status_code, bare.headers.get("www-authenticate")) == (401, "Bearer")
            rest = await http.get("/api/chats")
            assert (rest.status_code, rest.headers.get("www-authenticate")) == (401, "Bearer")
    finally:
        await stop(proc)
