"""Hub/REST access tokens: HS256 JWTs with ``sub`` (user UUID), ``iat`` and ``exp``."""

from __future__ import annotations

import time
from uuid import UUID

import jwt


def mint_token(secret: str, user_id: UUID, *, ttl: float = 3600.0, admin: bool = False) -> str:
    now = int(time.time())
    claims: dict[str, object] = {"sub": str(user_id), "iat": now, "exp": now + int(ttl)}
    if admin:
        claims["role"] = "admin"
    return jwt.encode(claims, secret, algorithm="HS256")
