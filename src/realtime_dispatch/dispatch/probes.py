"""The worker's own HTTP face: ``/metrics`` (the dispatcher's registry), ``/healthz`` and
``/readyz``, for ``realtime-dispatch worker --port P``.

``/healthz`` answers 200 while every runner's task runs (the process is alive and its event
loop answers); 503 once one ended without a stop. ``/readyz`` answers 200 when every runner can
dispatch: ``active`` (it held the lock in its last turn) or ``standby`` (connected, another
worker holds the lock; it takes over when that one goes). 503 while ``starting``, during a
database outage (``database_unavailable``), after a failing turn (``failing``) and once
``stopped``. The body lists each runner's state by partition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from realtime_dispatch.dispatch.availability import RunnerState
from realtime_dispatch.dispatch.runner import DispatchRunner


def readiness(runners: Sequence[DispatchRunner]) -> tuple[bool, dict[str, object]]:
    """Whether every runner can dispatch, and the body ``/readyz`` answers with."""
    states = {str(runner.dispatcher.partition): runner.state for runner in runners}
    ready = bool(states) and all(state.ready for state in states.values())
    if ready:
        status = "ready"
    elif any(state is RunnerState.UNAVAILABLE for state in states.values()):
        status = RunnerState.UNAVAILABLE.value
    else:
        status = "not ready"
    return ready, {"status": status, "runners": {k: v.value for k, v in states.items()}}


def worker_routes(
    runners: Sequence[DispatchRunner],
    registry: CollectorRegistry,
    *,
    alive: Callable[[], bool],
) -> list[BaseRoute]:
    """``alive``: every runner's task still runs (or was asked to stop)."""

    async def healthz(_request: Request) -> Response:
        ok = alive()
        return JSONResponse({"status": "ok" if ok else "failed"}, status_code=200 if ok else 503)

    async def readyz(_request: Request) -> Response:
        ready, body = readiness(runners)
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
