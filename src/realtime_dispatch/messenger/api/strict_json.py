"""Request bodies parsed by orjson instead of the standard library: ``"\\ud800"`` (a lone
surrogate escape) is valid JSON text but no Unicode that PostgreSQL (UTF-8) can store. The
standard parser turns it into a string that fails later, wherever it is first encoded; orjson
refuses it while parsing, so every body with one gets the 422 of any malformed JSON, with the
reason, before any handler runs (nothing can be half-written)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import orjson
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response


class _OrjsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            # orjson.JSONDecodeError is a json.JSONDecodeError: FastAPI answers it as json_invalid.
            self._json = orjson.loads(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """The route class of the REST routers (``APIRouter(route_class=StrictJsonRoute)``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(_OrjsonRequest(request.scope, request.receive))

        return route


RouteT = TypeVar("RouteT", bound=Callable[..., Any])


def no_content(
    method: Callable[..., Callable[[RouteT], RouteT]], path: str, summary: str
) -> Callable[[RouteT], RouteT]:
    """A route that answers 204 with no body: ``@no_content(router.post, "/x/read", "Mark")``."""
    return method(path, status_code=204, response_class=Response, summary=summary)
