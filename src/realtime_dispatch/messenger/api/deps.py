"""Request dependencies: the caller (bearer JWT, checked by the hub's
:class:`~realtime_dispatch.auth.tokens.TokenVerifier`, revocations included) and a pooled
database connection. Both live in the app's state, set by :func:`create_api`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated
from uuid import UUID

import asyncpg
from asyncpg.pool import PoolConnectionProxy
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.auth.tokens import TokenVerifier
from realtime_dispatch.edge.request_guard import verified_identity

if TYPE_CHECKING:
    PooledConnection = PoolConnectionProxy[asyncpg.Record]
else:  # FastAPI evaluates the annotations at runtime, where the proxy is not subscriptable.
    PooledConnection = PoolConnectionProxy

_bearer = HTTPBearer(
    auto_error=False,
    description="A hub JWT (HS256 or the identity provider's RS256/ES256; its user claim, "
    "`sub` by default, is the user id).",
)


async def current_user(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> UUID:
    """The caller's user id; :class:`~realtime_dispatch.auth.tokens.AuthError` (→ 401) when the
    token is missing, expired, forged or revoked."""
    token = credentials.credentials if credentials is not None else None
    checked = verified_identity(request.scope, token)  # the request guard's, same token
    if not isinstance(checked, Identity):
        verifier: TokenVerifier = request.app.state.verifier
        checked = await verifier.verify(token)
    user_id = checked.user_id
    # The reference messenger runs on uuid keys only (the CLI refuses another REALTIME_KEY_TYPE
    # beside it), so its users are UUIDs.
    assert isinstance(user_id, UUID), type(user_id)
    return user_id


async def connection(request: Request) -> AsyncIterator[PooledConnection]:
    pool: asyncpg.Pool = request.app.state.pool
    async with pool.acquire() as conn:
        yield conn


User = Annotated[UUID, Depends(current_user)]
Conn = Annotated[PooledConnection, Depends(connection)]
