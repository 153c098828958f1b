"""Routes of the demo page.

* ``GET /`` and ``GET /demo/static/{demo.js,demo.css}`` — the page (no CDN, nothing external).
* ``GET /demo/api/users`` — the demo cast, and whether this server mints demo tokens.
* ``GET /demo/api/chats`` — the caller's chats with everyone's read marks (bearer token).
* ``POST /demo/api/token`` ``{"user": "alice"}`` — a token for a demo user. Mounted only when
  ``dev_secret`` is given, i.e. when ``serve`` generated its development secrets. It takes
  ``application/json`` only (415 otherwise: a cross-site form cannot send that without a CORS
  preflight, which this server never grants) and answers only a ``Host`` that names the address
  it serves (403 otherwise: :mod:`.hosts`, against DNS rebinding).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import asyncpg
import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from realtime_dispatch.auth.tokens import (
    AuthError,
    KeysUnavailable,
    TokenVerifier,
    bearer,
    mint_token,
)
from realtime_dispatch.edge.request_guard import DEFAULT_MAX_BODY_BYTES, BodyRule
from realtime_dispatch.messenger.demo.hosts import served_host
from realtime_dispatch.messenger.demo.users import BY_KEY, DEMO_USERS

TOKEN_TTL_SECONDS = 12 * 3600
DEMO_BODY_RULES = (
    BodyRule("/demo/api/token", 1024, "none"),  # {"user": "alice"}
    BodyRule("/demo/api/.*", DEFAULT_MAX_BODY_BYTES, "token"),
)
_STATIC = {
    "demo.js": "text/javascript",
    "demo.css": "text/css",
    "messenger-client.js": "text/javascript",  # the TypeScript SDK's bundle (clients/js)
}

# The caller's active chats, newest first, each with every participant's read mark.
CHATS_SQL = """
SELECT c.id, c.title, c.last_seq,
       json_agg(json_build_object('userId', o.user_id, 'active', o.active,
                                  'lastReadSeq', o.last_read_seq) ORDER BY o.joined_at) AS people
FROM messenger.participants p
JOIN messenger.chats c ON c.id = p.chat_id
JOIN messenger.participants o ON o.chat_id = c.id
WHERE p.user_id = $1 AND p.active
GROUP BY c.id
ORDER BY c.created_at DESC
LIMIT 100
"""


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _read(name: str) -> str:
    return (
        resources.files("realtime_dispatch.messenger.demo")
        .joinpath(f"static/{name}")
        .read_text("utf-8")
    )


def _is_json(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"


def demo_routes(
    pool: asyncpg.Pool,
    verifier: TokenVerifier,
    *,
    dev_secret: str | None,
    host: str = "127.0.0.1",
    port: int = 8000,
) -> list[BaseRoute]:
    """The demo's routes; ``host`` and ``port`` are the address ``serve`` listens on."""
    page = _read("index.html")
    static = {name: (_read(name), kind) for name, kind in _STATIC.items()}

    async def index(_: Request) -> Response:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    async def asset(request: Request) -> Response:
        found = static.get(request.path_params["name"])
        if found is None:
            return JSONResponse({"error": "NotFound"}, status_code=404)
        text, kind = found
        return Response(text, media_type=kind, headers={"Cache-Control": "no-store"})

    async def users(_: Request) -> Response:
        return _json(
            {"users": [u.as_json() for u in DEMO_USERS], "devTokens": dev_secret is not None}
        )

    async def chats(request: Request) -> Response:
        try:
            user = (await verifier.verify(bearer(request.headers))).user_id
        except (AuthError, KeysUnavailable) as exc:
            return _json({"error": "Unauthorized", "message": exc.code}, 401)
        rows = await pool.fetch(CHATS_SQL, user)
        return _json(
            {
                "items": [
                    {
                        "chatId": str(r["id"]),
                        "title": r["title"],
                        "lastSeq": r["last_seq"],
                        "participants": orjson.loads(r["people"]),
                    }
                    for r in rows
                ]
            }
        )

    routes: list[BaseRoute] = [
        Route("/", index, methods=["GET"]),
        Route("/demo/static/{name}", asset, methods=["GET"]),
        Route("/demo/api/users", users, methods=["GET"]),
        Route("/demo/api/chats", chats, methods=["GET"]),
    ]
    if dev_secret is not None:
        secret = dev_secret

        async def token(request: Request) -> Response:
            if not served_host(request.headers.get("host"), bound_host=host, port=port):
                message = "the Host header does not name the address this server serves"
                return _json({"error": "Forbidden", "message": message}, 403)
            if not _is_json(request.headers.get("content-type")):
                message = "Content-Type must be application/json"
                return _json({"error": "UnsupportedMediaType", "message": message}, 415)
            try:
                body = orjson.loads(await request.body())
                user = BY_KEY[body["user"]]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                names = ", ".join(BY_KEY)
                return _json({"error": "InvalidRequest", "message": f"user: one of {names}"}, 422)
            minted = mint_token(secret, user.user_id, ttl=TOKEN_TTL_SECONDS)
            return _json({**user.as_json(), "token": minted})

        routes.append(Route("/demo/api/token", token, methods=["POST"]))
    return routes
