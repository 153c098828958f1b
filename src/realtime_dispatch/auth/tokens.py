"""Hub/REST access tokens, minted and verified here only: HS256 JWTs (``sub`` = user UUID, ``exp``
required) and the service key of the push endpoint. Tokens are never logged; failures are
reported by a short code only."""

from __future__ import annotations

import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from uuid import UUID

import jwt

from realtime_dispatch.errors import RealtimeDispatchError

ALGORITHM = "HS256"
LEEWAY_SECONDS = 5.0


class AuthError(RealtimeDispatchError):
    """Missing, expired, forged or malformed credentials (→ 401)."""

    code = "Unauthorized"


def bearer(headers: Mapping[str, str]) -> str | None:
    value = headers.get("authorization")
    if value is None:
        return None
    scheme, _, credentials = value.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


def request_token(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The token from ``Authorization: Bearer`` (Node, .NET, Python clients) or the
    ``access_token`` query parameter (browsers cannot set WebSocket headers)."""
    return bearer(headers) or query.get("access_token") or None


ADMIN_ROLE = "admin"


@dataclass(frozen=True, slots=True)
class Identity:
    user_id: UUID
    admin: bool = False


class TokenVerifier:
    """Checks hub tokens against ``secret``. With no secret configured every token is refused."""

    __slots__ = ("_secret",)

    def __init__(self, secret: str | None) -> None:
        self._secret = secret

    def user_of(self, token: str | None) -> UUID:
        return self.identity_of(token).user_id

    def identity_of(self, token: str | None) -> Identity:
        """The verified user and whether the token carries the ``admin`` role claim."""
        if token is None:
            raise AuthError("missing token", code="MissingToken")
        if not self._secret:
            raise AuthError("no token secret configured", code="NoSecret")
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                options={"require": ["exp", "sub"]},
                leeway=LEEWAY_SECONDS,
            )
        except jwt.ExpiredSignatureError as exc:
            raise AuthError("token expired", code="Expired") from exc
        except jwt.InvalidTokenError as exc:
            raise AuthError("invalid token", code="InvalidToken") from exc
        try:
            user_id = UUID(str(claims["sub"]))
        except ValueError as exc:
            raise AuthError("sub is not a user id", code="InvalidSubject") from exc
        return Identity(user_id, admin=claims.get("role") == ADMIN_ROLE)


def service_key_matches(headers: Mapping[str, str], expected: str | None) -> bool:
    """Constant-time check of the push endpoint's bearer key; no key configured → refused."""
    presented = bearer(headers)
    if not expected or presented is None:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def mint_token(secret: str, user_id: UUID, *, ttl: float = 3600.0, admin: bool = False) -> str:
    """A hub/REST access token: ``sub`` (user UUID), ``iat``, ``exp`` and, for operators, the
    ``admin`` role claim."""
    now = int(time.time())
    claims: dict[str, object] = {"sub": str(user_id), "iat": now, "exp": now + int(ttl)}
    if admin:
        claims["role"] = ADMIN_ROLE
    return jwt.encode(claims, secret, algorithm=ALGORITHM)
