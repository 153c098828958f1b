"""Token verification: HS256 and an identity provider's RS256 / ES256 keys from a JWKS (served
here through httpx's mock transport; tests/integration/test_hub_auth.py serves one over real
HTTP), issuer, audience, the user claim, revocations, and the hub's expiry queue."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm

from realtime_dispatch.auth.identity import Identity
from realtime_dispatch.auth.jwks import JwksKeys, KeysUnavailable, parse_key_set
from realtime_dispatch.auth.revocations import (
    Revocation,
    RevocationChange,
    Revocations,
    parse_change,
)
from realtime_dispatch.auth.tokens import AuthError, TokenOptions, TokenVerifier, mint_token
from realtime_dispatch.hub.connections.connection import (
    TOKEN_EXPIRED,
    ConnectionLimits,
    HubConnection,
    WebSocketWriter,
    Writer,
    write_loop,
)
from realtime_dispatch.hub.connections.expiry import ExpiryQueue
from realtime_dispatch.hub.connections.outbound import Outbound
from realtime_dispatch.hub.connections.session import InboundSession
from realtime_dispatch.hub.transports.http_connections import LongPollWriter
from realtime_dispatch.hub.transports.sse import SseWriter, sse_event
from realtime_dispatch.hub.wire.protocol import close_message
from tests.jwks import AUDIENCE, ISSUER, public_jwk

USER = uuid.uuid4()
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def idp_token(kid: str, key: Any, **claims: Any) -> str:
    now = int(time.time())
    payload = {"sub": str(USER), "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300}
    payload.update(claims)
    algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": kid})


class Provider:
    """A JWKS endpoint whose keys and health the test changes."""

    def __init__(self, *keys: dict[str, Any]) -> None:
        self.keys = list(keys)
        self.failing = False
        self.requests = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.failing:
            return httpx.Response(500)
        return httpx.Response(200, json={"keys": self.keys})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def verifier_for(
    provider: Provider, clock: Clock | None = None, **options: Any
) -> tuple[TokenVerifier, JwksKeys]:
    keys = JwksKeys(
        "https://idp.example/jwks",
        min_refetch=options.pop("min_refetch", 0.0),
        refresh_after=options.pop("refresh_after", 300.0),
        clock=clock or time.monotonic,
        transport=httpx.MockTransport(provider.handle),
    )
    settings = TokenOptions(jwks_url=keys.url, issuer=ISSUER, audience=AUDIENCE, **options)
    return TokenVerifier(settings, keys=keys), keys


async def k1_verified(
    clock: Clock | None = None, **options: Any
) -> tuple[Provider, TokenVerifier, JwksKeys]:
    """A provider publishing k1, and a verifier that has checked a k1 token (its set fetched)."""
    provider = Provider(public_jwk("k1", RSA_KEY))
    verifier, keys = verifier_for(provider, clock, **options)
    await verifier.verify(idp_token("k1", RSA_KEY))
    return provider, verifier, keys


async def refused_code(verifier: Any, token: str) -> str:
    """The code of the :class:`AuthError` with which ``verifier`` refuses ``token``."""
    with pytest.raises(AuthError) as refused:
        await verifier.verify(token)
    return refused.value.code


async def test_rs256_and_es256_tokens_verify_into_an_identity():
    provider = Provider(public_jwk("rsa-1", RSA_KEY), public_jwk("ec-1", EC_KEY))
    verifier, keys = verifier_for(provider)
    for kid, key in (("rsa-1", RSA_KEY), ("ec-1", EC_KEY)):
        token = idp_token(kid, key, iat=1_700_000_000, exp=int(time.time()) + 60)
        identity = await verifier.verify(token)
        assert identity.user_id == USER
        assert identity.issued_at == 1_700_000_000.0
        assert identity.expires_at == float(
            jwt.decode(token, options={"verify_signature": False})["exp"]
        )
        assert identity.admin is False
    assert provider.requests == 1  # one fetch, then cached
    await keys.aclose()


async def test_rotation_is_followed_by_kid_and_a_retired_key_is_refused():
    provider, verifier, keys = await k1_verified()
    new_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    provider.keys = [public_jwk("k2", new_key)]  # the provider rotates
    assert (await verifier.verify(idp_token("k2", new_key))).user_id == USER
    assert provider.requests == 2
    # K1 is gone from the set now:
    assert await refused_code(verifier, idp_token("k1", RSA_KEY)) == "UnknownKey"
    await keys.aclose()


async def test_unknown_kids_are_fetched_at_most_once_per_interval():
    clock = Clock()
    provider, verifier, keys = await k1_verified(clock, min_refetch=30.0)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for n in range(5):  # a flood of made-up kids, and one signed by a key nobody published
        assert await refused_code(verifier, idp_token(f"made-up-{n}", stranger)) == "UnknownKey"
    assert provider.requests == 1
    clock.now += 31
    with pytest.raises(AuthError):
        await verifier.verify(idp_token("made-up-again", stranger))
    assert provider.requests == 2
    await keys.aclose()


async def test_a_failed_fetch_keeps_the_known_keys():
    clock = Clock()
    provider, verifier, keys = await k1_verified(clock, refresh_after=60.0)
    provider.failing = True
    clock.now += 120  # stale: refetched on use, which fails
    assert (await verifier.verify(idp_token("k1", RSA_KEY))).user_id == USER
    assert provider.requests == 2
    with pytest.raises(KeysUnavailable):  # a key never seen cannot be checked: 503, not 401
        await verifier.verify(idp_token("k9", EC_KEY))
    await keys.aclose()


async def test_provider_down_from_the_start_is_unavailable_not_unauthorized():
    provider = Provider(public_jwk("k1", RSA_KEY))
    provider.failing = True
    verifier, keys = verifier_for(provider)
    with pytest.raises(KeysUnavailable):
        await verifier.verify(idp_token("k1", RSA_KEY))
    await keys.aclose()


async def test_issuer_audience_and_user_claim_are_enforced():
    provider = Provider(public_jwk("k1", RSA_KEY))
    verifier, keys = verifier_for(provider)
    cases = {
        "InvalidIssuer": idp_token("k1", RSA_KEY, iss="https://evil.example"),
        "InvalidAudience": idp_token("k1", RSA_KEY, aud="someone-else"),
        "InvalidSubject": idp_token("k1", RSA_KEY, sub="auth0|1234"),
        "Expired": idp_token("k1", RSA_KEY, exp=int(time.time()) - 60),
    }
    for code, token in cases.items():
        assert await refused_code(verifier, token) == code, code
    for missing in ("iss", "aud"):
        claims = jwt.decode(idp_token("k1", RSA_KEY), options={"verify_signature": False})
        del claims[missing]
        token = jwt.encode(claims, RSA_KEY, algorithm="RS256", headers={"kid": "k1"})
        assert await refused_code(verifier, token) == "InvalidToken"

    by_oid, oid_keys = verifier_for(provider, user_claim="oid")
    oid = uuid.uuid4()
    token = idp_token("k1", RSA_KEY, sub="not-a-uuid", oid=str(oid))
    assert (await by_oid.verify(token)).user_id == oid
    # The claim is required:
    assert await refused_code(by_oid, idp_token("k1", RSA_KEY)) == "InvalidToken"
    await keys.aclose()
    await oid_keys.aclose()


async def test_dates_are_numbers_and_the_user_claim_is_canonical():
    """H19: ``exp``, ``nbf`` and ``iat`` as JSON numbers only (PyJWT alone takes a numeric
    string); the user claim exactly as ``str(UUID)`` writes it."""
    secret = "s" * 40
    verifier = TokenVerifier(secret)
    now = int(time.time())

    def token(**claims: Any) -> str:
        return jwt.encode({"sub": str(USER), "exp": now + 300, **claims}, secret, "HS256")

    assert (await verifier.verify(token(nbf=now - 5, iat=now))).user_id == USER
    assert (await verifier.verify(token(exp=now + 300.5, iat=now + 0.25))).issued_at == now + 0.25
    for claim, value in [
        ("exp", str(now + 300)),
        ("nbf", str(now - 5)),
        ("iat", str(now)),
        ("exp", f"{now + 300}.0"),
    ]:
        assert await refused_code(verifier, token(**{claim: value})) == "InvalidToken", claim
    for name in ("nbf", "iat"):  # a bool is an int to Python, not a number to JSON
        assert await refused_code(verifier, token(**{name: False})) == "InvalidToken", name
    with pytest.raises(AuthError):
        await verifier.verify(token(exp=True))
    for sub in (f"{{{USER}}}", f"urn:uuid:{USER}", str(USER).upper(), USER.hex, f" {USER}"):
        assert await refused_code(verifier, token(sub=sub)) == "InvalidSubject", sub


async def test_algorithm_confusion_is_refused():
    """An HS256 token "signed" with the provider's public key, an RS256 token without a JWKS,
    and an HS256 token with no secret configured: all refused."""
    provider = Provider(public_jwk("k1", RSA_KEY))
    verifier, keys = verifier_for(provider)
    claims = jwt.decode(idp_token("k1", RSA_KEY), options={"verify_signature": False})
    hs_with_public = jwt.encode(
        claims, "public-material-" * 4, algorithm="HS256", headers={"kid": "k1"}
    )
    with pytest.raises(AuthError):
        await verifier.verify(hs_with_public)
    secret_only = TokenVerifier(TokenOptions(secret="s" * 40, issuer=ISSUER, audience=AUDIENCE))
    assert await refused_code(secret_only, idp_token("k1", RSA_KEY)) == "InvalidToken"
    await keys.aclose()


async def test_minted_tokens_carry_iat_and_the_configured_claims():
    secret = "m" * 40
    options = TokenOptions(secret=secret, issuer=ISSUER, audience=AUDIENCE, user_claim="uid")
    token = mint_token(
        secret, USER, ttl=60, issuer=ISSUER, audience=AUDIENCE, user_claim="uid", now=1e9 + 0.7
    )
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["iat"] == 1_000_000_000
    assert claims["uid"] == str(USER)
    fresh = mint_token(secret, USER, ttl=60, issuer=ISSUER, audience=AUDIENCE, user_claim="uid")
    assert (await TokenVerifier(options).verify(fresh)).user_id == USER


def test_key_sets_keep_signing_keys_of_the_two_algorithms_only():
    oct_key = {"kty": "oct", "kid": "sym", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ"}
    enc = {**public_jwk("enc", RSA_KEY), "use": "enc"}
    no_kid = {k: v for k, v in public_jwk("x", EC_KEY).items() if k != "kid"}
    p384 = ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP384R1()).public_key(), as_dict=True)
    keys = parse_key_set(
        {"keys": [oct_key, enc, no_kid, {**p384, "kid": "p384"}, public_jwk("ok", EC_KEY), 7]}
    )
    assert list(keys) == ["ok"]
    with pytest.raises(ValueError, match="not a JSON Web Key Set"):
        parse_key_set({"not": "a key set"})


async def test_revocations_refuse_tokens_issued_before():
    revocations = Revocations()
    secret = "r" * 40
    verifier = TokenVerifier(TokenOptions(secret=secret), revocations=revocations)
    before = mint_token(secret, USER, now=time.time() - 10)
    revocations.apply(RevocationChange(USER, time.time() - 5))
    assert await refused_code(verifier, before) == "Revoked"
    assert (await verifier.verify(mint_token(secret, USER))).user_id == USER  # issued after
    no_iat = jwt.encode({"sub": str(USER), "exp": time.time() + 60}, secret, algorithm="HS256")
    with pytest.raises(AuthError):
        await verifier.verify(no_iat)
    other = uuid.uuid4()
    assert (await verifier.verify(mint_token(secret, other, now=time.time() - 10))).user_id == other
    revocations.apply(RevocationChange(USER, None))  # lifted
    assert (await verifier.verify(before)).user_id == USER


def test_a_reload_does_not_undo_changes_notified_while_it_ran():
    revocations = Revocations()
    a, b = uuid.uuid4(), uuid.uuid4()
    revocations.begin_load()
    revocations.apply(RevocationChange(a, 2000.0))  # committed after the snapshot was taken
    revocations.apply(RevocationChange(b, None))  # b lifted after the snapshot
    snapshot = [Revocation(b, datetime.fromtimestamp(1500.0, UTC))]
    revocations.finish_load(snapshot)
    assert revocations.users() == {a}
    identity = Identity(a, expires_at=math.inf, issued_at=1999.0)
    assert revocations.refuses(identity)


def test_revocation_payloads():
    user = uuid.uuid4()
    assert parse_change(f'{{"userId": "{user}", "revokedAt": 12.5}}') == RevocationChange(
        user, 12.5
    )
    assert parse_change(f'{{"userId": "{user}", "revokedAt": null}}') == RevocationChange(
        user, None
    )
    for bad in (
        "",
        "[]",
        '{"userId": "x", "revokedAt": 1}',
        f'{{"userId": "{user}", "revokedAt": "1"}}',
    ):
        assert parse_change(bad) is None


def test_expiry_queue_orders_moves_and_forgets():
    queue = ExpiryQueue()
    assert queue.next_at == math.inf
    queue.add("a", 30.0)
    queue.add("b", 10.0)
    queue.add("c", 20.0)
    assert queue.next_at == 10.0
    queue.add("b", 40.0)  # a resume with a fresher token
    queue.discard("c")
    assert queue.next_at == 30.0
    assert queue.pop_due(35.0) == ["a"]
    assert queue.pop_due(39.0) == []
    assert queue.pop_due(40.0) == ["b"]
    assert len(queue) == 0
    assert queue.next_at == math.inf
    for n in range(1000):  # churn with long tokens does not grow the heap without bound
        queue.add(f"c{n}", 1e12)
        queue.discard(f"c{n}")
    assert len(queue._heap) < 100


class RecordingWebSocket:
    """Stands in for the ASGI WebSocket of a server without the raw transport."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_text(self, text: str) -> None:
        self.sent.append(text)


@pytest.mark.parametrize("transport", ["websocket", "sse", "longpolling"])
async def test_the_writer_sends_nothing_queued_after_exp(transport):
    """Records queued before ``exp`` and not yet written when it passes are dropped: the writer
    sends the close message only, even if the hub's timer has not run, whatever the transport
    (its :class:`~realtime_dispatch.hub.connections.connection.Writer`)."""
    connection = HubConnection(
        connection_id="c",
        token="t",
        identity=Identity(USER, expires_at=time.time() - 1),  # exp passed, the timer not run
        session=InboundSession(max_record_chars=1024, stateful_allowed=False),
        outbound=Outbound(stateful=False, max_pending=16, max_replay_chars=1024),
        limits=ConnectionLimits(),
        on_sent=lambda _n: None,
        now=0.0,
    )
    connection.send(b'{"type":1,"target":"queued","arguments":[]}\x1e')
    close = close_message("token expired", allow_reconnect=True)
    writer: Writer
    sent: list[Any] = []
    if transport == "websocket":
        websocket = RecordingWebSocket()
        writer, sent = WebSocketWriter(websocket, None, binary=False), websocket.sent  # type: ignore[arg-type]
        expected: list[Any] = [close]
    elif transport == "sse":

        async def send(message: Any) -> None:
            sent.append(message["body"])

        writer, expected = SseWriter(send), [sse_event(close.encode())]
    else:
        poller = LongPollWriter()
        poll = poller.poll()  # a poll is waiting
        writer, expected = poller, [close.encode()]
    async with asyncio.timeout(5):  # a writer that wrote the record would wait for more
        await write_loop(connection, writer)
    if transport == "longpolling":
        sent = [poll.result()]
    assert sent == expected
    assert connection.closing == TOKEN_EXPIRED
