"""``/ops``: the operator page and its JSON API, for admin tokens only (a hub/REST JWT with the
``role: admin`` claim; ``realtime-dispatch token --user … --admin``).

* ``GET /ops`` — the page (static; it asks for the token and keeps it in the tab's session).
* ``GET /ops/api/summary`` — counts, oldest pending age, recent lag, who holds the lock.
* ``GET /ops/api/quarantined?kind=&limit=`` — quarantined rows with their ``last_error``.
* ``POST /ops/api/requeue`` — ``{"ids": [...]}`` or ``{"kind": "..."}`` → ``{"requeued": n}``.
* ``GET /ops/api/revocations`` — ``{"items": [{"userId", "revokedAt"}]}``, newest first.
* ``POST /ops/api/revocations`` — ``{"userId": ...}`` → 201 ``{"userId", "revokedAt"}``: the
  user's tokens issued until now are refused and their connections close on every replica.
* ``DELETE /ops/api/revocations/{userId}`` — lift it → ``{"userId", "revokedAt"}``, or 404.
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Any
from uuid import UUID

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from realtime_dispatch.auth.tokens import (
    AuthError,
    KeysUnavailable,
    TokenVerifier,
    bearer,
    www_authenticate,
)
from realtime_dispatch.edge.request_guard import DEFAULT_MAX_BODY_BYTES, BodyRule
from realtime_dispatch.manifest.kinds import KIND_NAME, MAX_KIND
from realtime_dispatch.ops.service import OpsService

MAX_LIMIT = 500


class RequeueRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[UUID] | None = None
    kind: str | None = Field(default=None, pattern=KIND_NAME.pattern, max_length=MAX_KIND)
    """A built-in kind or a declared one's name."""

    @model_validator(mode="after")
    def _one_selector(self) -> RequeueRequest:
        if (self.ids is None) == (self.kind is None):
            raise ValueError("give exactly one of ids, kind")
        if self.ids is not None and not 1 <= len(self.ids) <= MAX_LIMIT:
            raise ValueError(f"ids: 1 to {MAX_LIMIT} ids")
        return self


class RevokeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: StrictStr | StrictInt = Field(alias="userId")
    """The user's key as JSON gives it; read as a key of ``REALTIME_KEY_TYPE`` by the route."""


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


OPS_BODY_RULES = (BodyRule("/ops/api/.*", DEFAULT_MAX_BODY_BYTES, "token"),)
"""The operator API's requests are small JSON objects; an operator token comes first."""


def ops_routes(service: OpsService, verifier: TokenVerifier) -> list[BaseRoute]:
    page = resources.files("realtime_dispatch.ops").joinpath("static/ops.html").read_text("utf-8")
    keys = verifier.options.keys  # the users' key type (REALTIME_KEY_TYPE)

    async def admin_error(request: Request) -> Response | None:
        try:
            identity = await verifier.verify(bearer(request.headers))
        except AuthError as exc:
            denied = _error(401, f"admin token required ({exc.code})")
            denied.headers["WWW-Authenticate"] = www_authenticate(exc)
            return denied
        except KeysUnavailable:
            return _error(503, "the identity provider's keys are unavailable; retry later")
        if not identity.admin:
            return _error(403, "this token has no admin role")
        return None

    async def ops_page(_: Request) -> Response:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    async def summary(request: Request) -> Response:
        if (denied := await admin_error(request)) is not None:
            return denied
        stats = await service.stats()
        lag = await service.recent_lag()
        holder = await service.lock_holder()
        return _json(
            {
                "at": time.time(),
                "stats": stats.as_json(),
                "lag": lag.as_json(),
                "lockHolder": holder.as_json() if holder else None,
                "quarantinedByKind": await service.quarantined_by_kind(),
            }
        )

    async def quarantined(request: Request) -> Response:
        if (denied := await admin_error(request)) is not None:
            return denied
        kind_param = request.query_params.get("kind") or None
        try:
            if kind_param and (not KIND_NAME.fullmatch(kind_param) or len(kind_param) > MAX_KIND):
                raise ValueError(kind_param)
            kind = kind_param
            limit = int(request.query_params.get("limit", "100"))
        except ValueError:
            return _error(400, "kind must be a kind's name and limit an integer")
        if not 1 <= limit <= MAX_LIMIT:
            return _error(400, f"limit must be between 1 and {MAX_LIMIT}")
        rows = await service.quarantined(kind=kind, limit=limit)
        return _json({"items": [row.as_json() for row in rows]})

    async def requeue(request: Request) -> Response:
        if (denied := await admin_error(request)) is not None:
            return denied
        try:
            body: Any = orjson.loads(await request.body())
            command = RequeueRequest.model_validate(body)
        except orjson.JSONDecodeError:
            return _error(400, "body must be JSON")
        except ValidationError as exc:
            first = exc.errors()[0]
            return _error(422, str(first["msg"]).removeprefix("Value error, "))
        count = await service.requeue(ids=command.ids, kind=command.kind)
        return _json({"requeued": count})

    async def revocations(request: Request) -> Response:
        if (denied := await admin_error(request)) is not None:
            return denied
        if request.method == "GET":
            items = await service.revocations()
            return _json({"items": [r.as_json_with(keys) for r in items]})
        try:
            command = RevokeRequest.model_validate(orjson.loads(await request.body()))
        except orjson.JSONDecodeError:
            return _error(400, "body must be JSON")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            return _error(422, f"{where}: {first['msg']}" if where else str(first["msg"]))
        try:
            user = keys.from_json(command.user_id)
        except ValueError:
            return _error(422, f"userId: not a key of REALTIME_KEY_TYPE={keys.name}")
        revocation = await service.revoke(user)
        return _json(revocation.as_json_with(keys), 201)

    async def lift(request: Request) -> Response:
        if (denied := await admin_error(request)) is not None:
            return denied
        try:
            user_id = keys.from_json(request.path_params["user_id"])
        except ValueError:
            return _error(400, f"userId must be a key of REALTIME_KEY_TYPE={keys.name}")
        lifted = await service.lift_revocation(user_id)
        if lifted is None:
            return _error(404, "no revocation for this user")
        return _json(lifted.as_json_with(keys))

    return [
        Route("/ops", ops_page, methods=["GET"]),
        Route("/ops/api/revocations", revocations, methods=["GET", "POST"]),
        Route("/ops/api/revocations/{user_id:str}", lift, methods=["DELETE"]),
        Route("/ops/api/summary", summary, methods=["GET"]),
        Route("/ops/api/quarantined", quarantined, methods=["GET"]),
        Route("/ops/api/requeue", requeue, methods=["POST"]),
    ]
