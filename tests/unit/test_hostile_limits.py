"""The pure parts of the limits against hostile clients: the negotiation store's bounds, the
per-user admission, the request guard's order (credentials, then size), log redaction and the
demo endpoint's Host check."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from uuid import uuid4

import pytest

from realtime_dispatch.auth.tokens import AuthError
from realtime_dispatch.edge.forwarded import TrustedProxies, parse_networks
from realtime_dispatch.edge.http_refusals import RefusalLog, RefusalReason
from realtime_dispatch.edge.request_guard import BodyRule, RequestGuard
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.hub.connections.caps import Admission, ConnectionRefused
from realtime_dispatch.hub.connections.registry import GroupRegistry
from realtime_dispatch.hub.transports.http_connections import LongPollWriter
from realtime_dispatch.hub.transports.negotiate import NegotiationStore
from realtime_dispatch.messenger.demo.hosts import served_host
from realtime_dispatch.settings import load_settings
from realtime_dispatch.telemetry.logs import RedactSecrets, redact


def test_a_users_negotiations_push_out_their_oldest_and_the_total_is_bounded() -> None:
    """H4 and H10: a user's and an address's negotiations push out their own oldest; a full
    store pushes out the oldest of all, and nobody's negotiate is refused."""
    evicted: list[int] = []
    store = NegotiationStore(60, per_user=3, per_address=4, total=10)
    store.on_evicted = lambda: evicted.append(1)
    alice, bob, carol = uuid4(), uuid4(), uuid4()
    first = store.create(alice, stateful=False, now=0, address="a")
    for _ in range(9):
        store.create(alice, stateful=False, now=0, address="a")
    assert store.pending_for(alice) == 3
    assert store.claim(first.token, alice, now=1) is None  # pushed out by alice's own
    bobs = [store.create(bob, stateful=False, now=0, address="a") for _ in range(2)]
    assert store.pending_for(alice) + store.pending_for(bob) == 4  # address "a": at most 4
    assert store.claim(bobs[0].token, bob, now=1) == bobs[0]
    mallory = [uuid4() for _ in range(200)]  # 200 accounts behind one address
    for user in mallory:
        store.create(user, stateful=False, now=2, address="m")
    assert len(store) == 7  # alice 2, bob 1, mallory 4
    assert not evicted  # that address only ever pushed out its own
    victim = store.create(carol, stateful=False, now=3, address="c")
    assert store.claim(victim.token, carol, now=3) == victim
    for n, user in enumerate(mallory):  # 200 addresses: the oldest of all go, none refused
        store.create(user, stateful=False, now=4, address=f"m{n}")
    assert len(store) == 10
    assert len(evicted) > 0
    again = store.create(carol, stateful=False, now=70)  # the others expired meanwhile
    assert len(store) == 1
    assert store.claim(again.connection_id, carol, now=71) == again


def test_admission_counts_registered_and_opening_connections() -> None:
    registry = GroupRegistry()
    admission = Admission(registry, max_per_user=2)
    user = uuid4()
    admission.admit(user, "negotiate")  # reserves nothing
    opening = admission.admit(user, "open")
    registry.add_connection("c1", user)
    assert admission.held_by(user) == 2  # one registered, one being opened
    with pytest.raises(ConnectionRefused) as refused:
        admission.admit(user, "open")
    assert (refused.value.status, refused.value.code) == (429, "TooManyConnections")
    with pytest.raises(ConnectionRefused):
        admission.admit(user, "negotiate")
    admission.admit(uuid4(), "open")  # another user is not affected
    assert admission.opening == 2  # the gauge's handshake state (H11)
    opening.release()
    opening.release()  # idempotent
    assert admission.held_by(user) == 1
    assert admission.opening == 1
    admission.admit(user, "open")


async def _call(guard: RequestGuard, headers: list[tuple[bytes, bytes]], body: list[bytes]) -> Any:
    chunks = [
        {"type": "http.request", "body": b, "more_body": i < len(body) - 1}
        for i, b in enumerate(body)
    ]
    received: list[int] = []
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        received.append(1)
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/api/x", "headers": headers}
    await guard(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, len(received), sent


def _guard() -> tuple[RequestGuard, list[bytes]]:
    seen: list[bytes] = []

    async def app(_scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        seen.append(message["body"])
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def check(token: str | None) -> object:
        if token != "good":
            raise AuthError("bad")
        return token

    rule = BodyRule("/api/.*", 10, "token")
    return RequestGuard(app, rules=[rule], check_token=check, service_key=None), seen


def test_the_guard_checks_credentials_before_reading_and_refuses_past_the_limit() -> None:
    guard, seen = _guard()
    good = [(b"authorization", b"Bearer good")]
    chunked = [(b"transfer-encoding", b"chunked")]
    # No token: 401 without reading a byte of the body.
    assert asyncio.run(_call(guard, [(b"content-length", b"5")], [b"12345"]))[:2] == (401, 0)
    # A declared length over the limit: 413 without reading.
    assert asyncio.run(_call(guard, [*good, (b"content-length", b"11")], [b"x" * 11]))[:2] == (
        413,
        0,
    )
    # Streamed: refused on the chunk that passes the limit, the rest never read.
    status, reads, _ = asyncio.run(_call(guard, [*good, *chunked], [b"x" * 6, b"x" * 6, b"x"]))
    assert (status, reads) == (413, 2)
    assert seen == []
    # Within the limit: the app gets the body as sent, in one piece.
    status, _, _ = asyncio.run(_call(guard, [*good, *chunked], [b"1234", b"56789"]))
    assert (status, seen) == (201, [b"123456789"])


def test_tokens_are_redacted_from_log_records() -> None:
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    record = logging.LogRecord("uvicorn.error", logging.DEBUG, "", 0, "< %s: %s", None, None)
    record.args = ("authorization", f"Bearer {token}")
    RedactSecrets().filter(record)
    assert token not in record.getMessage()
    assert "signature" not in redact(f"GET /hubs/messenger?id=1&access_token={token} HTTP/1.1")
    assert redact("no secret here") == "no secret here"


def test_the_demo_token_endpoint_answers_its_own_address_only() -> None:
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "myhost:8000"):
        assert served_host(host, bound_host="myhost", port=8000), host
    for host in ("attacker.example:8000", "127.0.0.1:8001", "127.0.0.1", "", None, "[::1"):
        assert not served_host(host, bound_host="myhost", port=8000), host


def test_the_client_behind_a_trusted_proxy_is_the_rightmost_untrusted_hop() -> None:
    """H13: the forwarded address, from X-Forwarded-For or Forwarded (RFC 7239)."""
    proxies = TrustedProxies(parse_networks(["10.0.0.0/8", "::1"]))
    xff = [(b"x-forwarded-for", b"6.6.6.6, 198.51.100.7"), (b"x-forwarded-for", b"10.1.1.1")]
    assert proxies.client("10.0.0.2", xff) == "198.51.100.7"  # spoofed left entry ignored
    assert proxies.client("192.0.2.1", xff) == "192.0.2.1"  # an untrusted peer: itself
    assert proxies.client("10.0.0.2", []) == "10.0.0.2"  # no header: the proxy
    forwarded = [(b"forwarded", b'for="[2001:db8::7]:4711";proto=http, for=10.0.0.3')]
    assert proxies.client("::1", [*forwarded, *xff]) == "2001:db8::7"  # Forwarded wins
    assert proxies.client("10.0.0.2", [(b"forwarded", b"for=unknown")]) == "10.0.0.2"
    assert proxies.client("10.0.0.2", [(b"x-forwarded-for", b"10.9.9.9")]) == "10.9.9.9"
    assert not TrustedProxies(())
    with pytest.raises(ValueError, match=r"'10\.0\.0\.300'"):
        parse_networks(["10.0.0.0/8", "10.0.0.300"])


def test_invalid_trusted_proxies_name_the_variable() -> None:
    with pytest.raises(ConfigurationError) as error:
        load_settings(http_trusted_proxies="127.0.0.1, not-an-address")
    assert error.value.variable == "REALTIME_HTTP_TRUSTED_PROXIES"
    with pytest.raises(ConfigurationError) as error:
        load_settings(http_max_header_bytes=10)
    assert error.value.variable == "REALTIME_HTTP_MAX_HEADER_BYTES"
    settings = load_settings(http_trusted_proxies="127.0.0.1, 10.0.0.0/8")
    assert [str(n) for n in settings.trusted_proxy_networks()] == ["127.0.0.1/32", "10.0.0.0/8"]


def test_refusals_are_logged_once_per_address_and_interval_with_their_count() -> None:
    """H13: 5,000 refusals from one address are two lines in an interval, not 5,000."""
    lines: list[tuple[str, str, int]] = []
    refusals = RefusalLog(lambda r, a, n: lines.append((r.value, a, n)), interval=10, max_tracked=2)
    for _ in range(5000):
        refusals.refused(RefusalReason.CLIENT_CAP, "198.51.100.7", now=1)
    refusals.refused(RefusalReason.HEADER_TIMEOUT, "198.51.100.7", now=2)
    refusals.refused(RefusalReason.CLIENT_CAP, "198.51.100.8", now=2)  # past max_tracked
    refusals.refused(RefusalReason.CLIENT_CAP, "198.51.100.9", now=2)
    assert lines == [
        ("client_cap", "198.51.100.7", 1),
        ("header_timeout", "198.51.100.7", 1),
        ("client_cap", "*", 1),
    ]
    refusals.flush(now=5)  # not an interval yet
    assert len(lines) == 3
    refusals.flush(now=11)
    assert lines[3:] == [("client_cap", "198.51.100.7", 4999)]
    refusals.flush(now=12.5)
    assert lines[4:] == [("client_cap", "*", 1)]
    refusals.flush(now=30)  # quiet: forgotten, the next refusal is logged at once
    assert len(refusals) == 0
    refusals.refused(RefusalReason.CLIENT_CAP, "198.51.100.7", now=31)
    assert lines[-1] == ("client_cap", "198.51.100.7", 1)


async def test_a_long_polls_close_message_waits_for_the_next_poll() -> None:
    """H12: no poll waiting when the connection closes: the close message is kept for the
    next poll, which gets it before the 204 (None); with a poll waiting it goes at once."""
    writer = LongPollWriter()
    assert await writer.write_last([b"close", b"!"])
    writer.end()
    assert await writer.poll() == b"close!"
    assert await writer.poll() is None
    waiting = LongPollWriter()
    poll = waiting.poll()
    assert await waiting.write_last([b"close"])
    assert await poll == b"close"
    waiting.end()
    assert await waiting.poll() is None
