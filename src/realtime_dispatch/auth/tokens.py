"""Hub/REST access tokens, verified here only, by :meth:`TokenVerifier.verify`: the one entry
point of the hub (every transport), the REST API and the ops API. Tokens are never logged;
failures are reported by a short code only.

Two kinds of token are accepted, told apart by their header's ``alg``:

* ``HS256`` under ``REALTIME_HUB_JWT_SECRET`` (what ``realtime-dispatch token`` mints);
* ``RS256`` / ``ES256`` signed by a key of the identity provider's JWKS
  (``REALTIME_HUB_JWT_JWKS_URL``, :mod:`.jwks`), found by the header's ``kid``.

Either way ``exp`` and the user claim (``REALTIME_HUB_JWT_USER_CLAIM``, default ``sub``, a key
of ``REALTIME_KEY_TYPE``: a UUID in its canonical form, lowercase and hyphenated; a decimal
integer for ``bigint``, as a JSON number or string; a string for ``text``) are required;
``exp``, ``nbf`` and ``iat`` must be JSON numbers (RFC 7519's NumericDate: PyJWT alone takes
``"exp": "1700000000"``); ``iss`` / ``aud`` must match ``REALTIME_HUB_JWT_ISSUER`` /
``REALTIME_HUB_JWT_AUDIENCE`` when those are set. A token issued before its user's revocation
(:mod:`.revocations`) is refused.

::

    AuthError (→ 401)         missing, expired, forged, malformed or revoked
    KeysUnavailable (→ 503)   the provider's keys cannot be fetched and are not cached

Every 401 says why in ``WWW-Authenticate`` (:func:`www_authenticate`, RFC 6750 §3):
``Bearer error="invalid_token", error_description="token has no exp"``. The description is the
error's message, a fixed text of this module (never a value from the token).
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.auth.jwks import SIGNING_ALGORITHMS, JwksKeys
from realtime_dispatch.auth.jwks import KeysUnavailable as KeysUnavailable  # noqa: PLC0414
from realtime_dispatch.auth.revocations import Revocations
from realtime_dispatch.errors import RealtimeDispatchError
from realtime_dispatch.values.keys import UUID_KEYS, Key, KeyCodec

ALGORITHM = "HS256"
LEEWAY_SECONDS = 5.0
ADMIN_ROLE = "admin"
NUMERIC_DATES = ("exp", "nbf", "iat")
_DECODE_REFUSALS: tuple[tuple[type[jwt.InvalidTokenError], str, str], ...] = (
    (jwt.ExpiredSignatureError, "token expired", "Expired"),
    (jwt.InvalidIssuerError, "wrong token issuer", "InvalidIssuer"),
    (jwt.InvalidAudienceError, "wrong token audience", "InvalidAudience"),
    (jwt.InvalidSignatureError, "token signature does not verify", "InvalidToken"),
    (jwt.ImmatureSignatureError, "token not valid yet (nbf or iat)", "InvalidToken"),
    (jwt.DecodeError, "token is not a well-formed JWT", "InvalidToken"),
    (jwt.InvalidAlgorithmError, "token algorithm not accepted", "InvalidToken"),
)
"""PyJWT's refusals of a token, the first that matches: (its error, our message, our code)."""


class AuthError(RealtimeDispatchError):
    """Missing, expired, forged, malformed or revoked credentials (→ 401)."""

    code = "Unauthorized"


def www_authenticate(error: AuthError) -> str:
    """The ``WWW-Authenticate`` value of a 401 for ``error``: the reason as
    ``error_description``; a bare ``Bearer`` challenge when no token was presented (RFC 6750
    §3.1: no error code then)."""
    if error.code == "MissingToken":
        return "Bearer"
    description = "".join(
        c for c in str(error) if c.isascii() and c.isprintable() and c not in '"\\'
    )
    return f'Bearer error="invalid_token", error_description="{description}"'


@dataclass(frozen=True, slots=True)
class TokenOptions:
    """Which tokens are accepted (``REALTIME_HUB_JWT_*``). With neither a secret nor a JWKS URL
    every token is refused."""

    secret: str | None = None
    jwks_url: str | None = None
    issuer: str | None = None
    audience: str | None = None
    user_claim: str = "sub"
    keys: KeyCodec = UUID_KEYS
    """The type of the user claim (``REALTIME_KEY_TYPE``)."""
    leeway: float = LEEWAY_SECONDS
    jwks_refresh_after: float = 300.0
    """Seconds a fetched key set is used before it is fetched again (on use)."""
    jwks_min_refetch: float = 30.0
    """At most one fetch per this many seconds, however many unknown ``kid`` values arrive."""
    jwks_timeout: float = 5.0

    def __repr__(self) -> str:
        return (
            f"TokenOptions(secret={'***' if self.secret else None}, jwks_url={self.jwks_url!r},"
            f" issuer={self.issuer!r}, audience={self.audience!r},"
            f" user_claim={self.user_claim!r}, keys={self.keys.name!r})"
        )


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


class TokenVerifier:
    """Verifies tokens against :class:`TokenOptions` and, when given, the revocations in force.

    ``verify`` is a coroutine (a JWKS may have to be fetched) that does no other I/O, so any
    ASGI middleware or route may await it before reading a body. Call :meth:`aclose` when done
    (it closes the JWKS client, if any).
    """

    __slots__ = ("keys", "options", "revocations")

    def __init__(
        self,
        options: TokenOptions | str | None,
        *,
        revocations: Revocations | None = None,
        keys: JwksKeys | None = None,
    ) -> None:
        if not isinstance(options, TokenOptions):
            options = TokenOptions(secret=options)  # a bare HS256 secret (or None)
        self.options = options
        self.revocations = revocations
        if keys is None and options.jwks_url:
            keys = JwksKeys(
                options.jwks_url,
                refresh_after=options.jwks_refresh_after,
                min_refetch=options.jwks_min_refetch,
                timeout=options.jwks_timeout,
            )
        self.keys = keys

    async def verify(self, token: str | None) -> Identity:
        """The verified :class:`Identity` of ``token``.

        Raises :class:`AuthError` (with a short ``code``: ``MissingToken``, ``NoSecret``,
        ``Expired``, ``InvalidToken``, ``InvalidIssuer``, ``InvalidAudience``, ``UnknownKey``,
        ``InvalidSubject``, ``Revoked``) or :class:`KeysUnavailable`.
        """
        if token is None:
            raise AuthError("missing token", code="MissingToken")
        options = self.options
        if not options.secret and self.keys is None:
            raise AuthError("no token secret configured", code="NoSecret")
        if self.keys is None:  # HS256 alone: the key is known without the header, read once
            identity = self._identity(self._decode(token, options.secret, ALGORITHM))
            return self._unrevoked(identity)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise AuthError("token is not a well-formed JWT", code="InvalidToken") from exc
        algorithm = header.get("alg")
        key: Any
        if algorithm == ALGORITHM and options.secret:
            key = options.secret
        elif algorithm in SIGNING_ALGORITHMS and self.keys is not None:
            kid = header.get("kid")
            if not isinstance(kid, str):
                raise AuthError("token has no kid", code="InvalidToken")
            try:
                found = await self.keys.key_for(kid)
            except KeyError as exc:
                raise AuthError("token signed by an unknown key", code="UnknownKey") from exc
            if found.algorithm_name != algorithm:
                raise AuthError("token algorithm does not match its key", code="InvalidToken")
            key = found.key
        else:
            raise AuthError("token algorithm not accepted", code="InvalidToken")
        return self._unrevoked(self._identity(self._decode(token, key, algorithm)))

    def _unrevoked(self, identity: Identity) -> Identity:
        if self.revocations is not None and self.revocations.refuses(identity):
            raise AuthError("token revoked", code="Revoked")
        return identity

    def _decode(self, token: str, key: Any, algorithm: str) -> dict[str, Any]:
        options = self.options
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                # The user claim is checked below, by the key type (a string for uuid and
                # text, an integer for bigint), so that its refusal names the claim and what
                # it must hold; PyJWT's own check of ``sub`` would say only "invalid token".
                options={"require": ["exp", options.user_claim], "verify_sub": False},
                issuer=options.issuer,
                audience=options.audience,
                leeway=options.leeway,
            )
        except jwt.InvalidTokenError as exc:
            raise _refusal(exc) from exc
        for name in NUMERIC_DATES:
            if name in claims and not _numeric_date(claims[name]):
                raise AuthError(f"{name} is not a NumericDate", code="InvalidToken")
        return claims

    def _identity(self, claims: dict[str, Any]) -> Identity:
        try:
            user_id = self.options.keys.from_claim(claims[self.options.user_claim])
        except ValueError as exc:
            claim, keys = self.options.user_claim, self.options.keys
            raise AuthError(
                f"user claim {claim} is not a user id ({keys.described})",
                code="InvalidSubject",
            ) from exc
        issued_at = claims.get("iat")
        return Identity(
            user_id=user_id,
            expires_at=float(claims["exp"]),
            issued_at=float(issued_at) if isinstance(issued_at, int | float) else None,
            admin=claims.get("role") == ADMIN_ROLE,
        )

    async def aclose(self) -> None:
        if self.keys is not None:
            await self.keys.aclose()


def _numeric_date(value: object) -> bool:
    """A JSON number (a bool is an int to Python, not to JSON), finite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def service_key_matches(headers: Mapping[str, str], expected: str | None) -> bool:
    """Constant-time check of the push endpoint's bearer key; no key configured → refused."""
    presented = bearer(headers)
    if not expected or presented is None:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def mint_token(
    secret: str,
    user_id: Key,
    *,
    ttl: float = 3600.0,
    admin: bool = False,
    issuer: str | None = None,
    audience: str | None = None,
    user_claim: str = "sub",
    now: float | None = None,
) -> str:
    """A hub/REST access token: the user's key as ``user_claim`` (and ``sub``; a string, as
    RFC 7519 has it, for every key type), ``iat``,
    ``exp``, ``iss`` / ``aud`` when given and, for operators, the ``admin`` role claim.

    ``iat`` is whole seconds, so a token minted in the same second as a revocation of its user
    counts as issued before it."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, object] = {"sub": str(user_id), "iat": issued, "exp": issued + int(ttl)}
    claims[user_claim] = str(user_id)
    if issuer is not None:
        claims["iss"] = issuer
    if audience is not None:
        claims["aud"] = audience
    if admin:
        claims["role"] = ADMIN_ROLE
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def _refusal(exc: jwt.InvalidTokenError) -> AuthError:
    """PyJWT's refusal of a token as ours (:data:`_DECODE_REFUSALS`); a missing claim is named
    (its name is ours: the required ones, iss, aud, never the token's)."""
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return AuthError(f"token has no {exc.claim}", code="InvalidToken")
    for error, message, code in _DECODE_REFUSALS:
        if isinstance(exc, error):
            return AuthError(message, code=code)
    return AuthError("invalid token", code="InvalidToken")
