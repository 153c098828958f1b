"""The REST API of the reference owner service: :func:`create_api`.

::

    app = create_api(pool=pool, options=settings.api_options(), routes=hub_routes(hub))

The pool is the caller's (opened and closed by whoever serves the app). Tokens are checked by
the hub's :class:`~realtime_dispatch.auth.tokens.TokenVerifier` when one is given (``serve``
and ``hub`` pass ``hub.verifier``, so one token serves both and revocations apply to both),
else by one made from the options' secret.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter
from starlette.routing import BaseRoute

from realtime_dispatch.auth.media import MediaMinter, MediaOptions
from realtime_dispatch.auth.tokens import TokenVerifier
from realtime_dispatch.messenger.api import chats, media, social
from realtime_dispatch.messenger.api.error_responses import install_error_handlers
from realtime_dispatch.messenger.api.send_rate import SendLimiter, SendRate

DESCRIPTION = """The reference messenger owner service. Every command writes its domain change
and its realtime push intent in one transaction; the dispatcher delivers the push to the hub
groups `chat:{chatId}` / `user:{userId}`. Bearer JWT (`sub` = user id), camelCase JSON.
Errors: `{"error": code, "message": text}` with 400 / 401 / 403 / 404 / 409 / 422, 429 with
`Retry-After` past a user's send rate (sends and edits), and 503 when join credentials are
asked for on a server without a media secret."""


@dataclass(frozen=True, slots=True)
class ApiOptions:
    """What the REST API needs besides its pool: the token secret (``None`` refuses every
    token), the media secrets for join credentials asked for over REST, and the key of the
    idempotency fingerprints (``None``: a key of this process only), and each user's send
    rate (``REALTIME_API_SEND_RATE`` / ``_BURST``)."""

    jwt_secret: str | None = None
    media: MediaOptions = field(default_factory=MediaOptions)
    fingerprint_key: bytes | None = field(default=None, repr=False)
    send_rate: SendRate = field(default_factory=SendRate)


def create_api(
    *,
    pool: asyncpg.Pool,
    options: ApiOptions,
    routes: Sequence[BaseRoute] = (),
    verifier: TokenVerifier | None = None,
    metrics_registry: CollectorRegistry | None = None,
) -> FastAPI:
    """The FastAPI app (``/api/…``, ``/openapi.json``, ``/docs``) plus ``routes`` (the hub's)."""
    app = FastAPI(
        title="realtime-dispatch messenger API",
        version="1",
        description=DESCRIPTION,
    )
    app.state.verifier = verifier if verifier is not None else TokenVerifier(options.jwt_secret)
    app.state.pool = pool
    app.state.fingerprint_key = options.fingerprint_key
    # The same minting as at delivery, for join credentials asked for over REST.
    app.state.minter = MediaMinter(options.media)
    app.state.send_limiter = SendLimiter(options.send_rate)
    app.state.throttled = Counter(
        "messenger_realtime_api_throttled",
        "Sends and edits refused with 429: past the user's send rate",
        ["action"],
        registry=metrics_registry if metrics_registry is not None else CollectorRegistry(),
    )
    install_error_handlers(app)
    for router in (chats.router, social.router, media.router):
        app.include_router(router)
    app.router.routes.extend(routes)
    return app
