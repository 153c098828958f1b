"""Limits before work: :class:`RequestGuard`, an ASGI middleware in front of REST and the hub's
HTTP routes.

For every HTTP request that carries a body (a ``Content-Length`` above 0 or any
``Transfer-Encoding``), before a byte of the body is read:

1. the credentials its route needs are checked (:class:`BodyRule` ``credentials``): a bearer
   token, the push endpoint's service key, or none. Without them: 401 at once, the body unread.
2. a declared ``Content-Length`` above the route's limit gets 413 at once; a streamed body is
   counted while it arrives and gets 413 the moment it passes the limit. Either way the
   connection is closed, and nothing beyond the limit is ever buffered.

The body (at most the limit) is then handed to the route as it was sent. Requests without a
body pass straight through (their route checks the credentials, as before), and so do
WebSockets. Because every body is bounded, parsing one costs the event loop at most what the
largest valid request costs (docs/reference.md, "Request limits").

The check is strictly weaker than the route's own (it takes what the route takes, and the
``access_token`` query parameter besides), so it never refuses what the route would accept.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from realtime_dispatch.auth.tokens import (
    AuthError,
    KeysUnavailable,
    bearer,
    request_token,
    service_key_matches,
    www_authenticate,
)

Credentials = Literal["token", "service_key", "none"]
TokenCheck = Callable[[str | None], Awaitable[object]]
"""Raises :class:`AuthError` for a missing or bad token, :class:`KeysUnavailable` when the
identity provider's keys cannot be had (``TokenVerifier.verify``)."""

DEFAULT_MAX_BODY_BYTES = 16 * 1024
VERIFIED = "realtime_dispatch.verified_token"
"""Key in the ASGI scope's ``state`` under which the guard leaves ``(token, identity)`` of the
token it verified, so that the route behind it need not verify the same token again
(:func:`verified_identity`)."""


@dataclass(frozen=True, slots=True)
class BodyRule:
    """The body limit and the credentials of the routes whose path matches ``path`` (a regular
    expression matched against the whole path) and whose method is in ``methods`` (any when
    empty). The first matching rule wins."""

    path: str
    max_bytes: int
    credentials: Credentials = "token"
    methods: frozenset[str] = frozenset()

    def matches(self, method: str, path: str, compiled: re.Pattern[str]) -> bool:
        return (not self.methods or method in self.methods) and compiled.fullmatch(path) is not None


class _TooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def _problem(
    status: int, code: str, message: str, challenge: str = "Bearer"
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """``challenge``: the ``WWW-Authenticate`` value of a 401."""
    body = orjson.dumps({"error": code, "message": message})
    # No "connection: close": uvicorn would close at once and reset a client still writing.
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", challenge.encode("latin-1")))
    return status, headers, body


class RequestGuard:
    """The middleware; ``rules`` in order, ``default_max_bytes`` for paths no rule matches
    (which need no credentials here)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        rules: Iterable[BodyRule],
        check_token: TokenCheck,
        service_key: str | None,
        default_max_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.app = app
        self._rules = [(rule, re.compile(rule.path)) for rule in rules]
        self._check_token = check_token
        self._service_key = service_key
        self._default = BodyRule(".*", default_max_bytes, "none")

    def rule_for(self, method: str, path: str) -> BodyRule:
        for rule, compiled in self._rules:
            if rule.matches(method, path, compiled):
                return rule
        return self._default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        length_header = _header(headers, b"content-length")
        chunked = _header(headers, b"transfer-encoding") is not None
        try:
            declared = int(length_header) if length_header is not None else 0
        except ValueError:
            declared = 0  # the HTTP parser has refused it already
        if declared <= 0 and not chunked:
            await self.app(scope, receive, send)
            return
        rule = self.rule_for(scope["method"], scope["path"])
        refusal = await self._refusal(rule, scope)
        if refusal is None and declared > rule.max_bytes:
            refusal = self._too_large(rule)
        if refusal is None:
            try:
                body = await _read_body(receive, rule.max_bytes)
            except _TooLarge:
                refusal = self._too_large(rule)
            except _Disconnected:
                return
        if refusal is not None:
            status, response_headers, content = refusal
            await send(
                {"type": "http.response.start", "status": status, "headers": response_headers}
            )
            await send({"type": "http.response.body", "body": content})
            return
        await self.app(scope, _replay(body, receive), send)

    async def _refusal(
        self, rule: BodyRule, scope: Scope
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        if rule.credentials == "none":
            return None
        query_string: bytes = scope.get("query_string", b"")
        raw = _header(scope["headers"], b"authorization")
        authorization = {"authorization": raw.decode("latin-1")} if raw is not None else {}
        if rule.credentials == "service_key":
            if service_key_matches(authorization, self._service_key):
                return None
            return _problem(401, "Unauthorized", "missing or wrong service key")
        query: Mapping[str, str] = {}
        if bearer(authorization) is None and b"access_token=" in query_string:
            query = dict(parse_qsl(query_string.decode("latin-1")))
        token = request_token(authorization, query)
        try:
            identity = await self._check_token(token)
        except AuthError as exc:
            message = "a valid bearer token is required"
            return _problem(401, "Unauthorized", message, www_authenticate(exc))
        except KeysUnavailable:
            return _problem(503, "KeysUnavailable", "the token's keys cannot be had now, retry")
        scope.setdefault("state", {})[VERIFIED] = (token, identity)
        return None

    @staticmethod
    def _too_large(rule: BodyRule) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        return _problem(413, "PayloadTooLarge", f"the body exceeds {rule.max_bytes} bytes")


def verified_identity(scope: Scope, token: str | None) -> object | None:
    """What the guard's check returned for ``token`` in this request, or ``None`` when it did not
    check that very token (a request without a body, or a route that reads another one)."""
    verified = scope.get("state", {}).get(VERIFIED)
    if verified is None or token is None or verified[0] != token:
        return None
    identity: object = verified[1]
    return identity


async def _read_body(receive: Receive, limit: int) -> bytes:
    """The whole body, or :class:`_TooLarge` as soon as more than ``limit`` bytes arrived."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app the body read already, then the real one (disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
