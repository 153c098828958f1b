"""Live connections under control, over real sockets on a real database: a connection closes at
its token's ``exp`` (and nothing reaches it after, even when the timer is late); a revocation
closes the user's connections on two replicas sharing one database and refuses earlier tokens on
the hub and REST; a replica started later reads it; an identity provider's RS256 / ES256 tokens
are checked against a JWKS served over HTTP by the test, through rotation and an outage."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from websockets.exceptions import InvalidStatus

from realtime_dispatch.auth import revocation_store
from realtime_dispatch.auth.tokens import TokenOptions, mint_token
from realtime_dispatch.hub.connections.registry import user_group
from realtime_dispatch.hub.wire.protocols import JSON, Transport
from realtime_dispatch.messenger.api.app import ApiOptions, create_api
from support.hub_wire import SECRET
from support.procs import wait_until
from tests.hub_fixtures import hub_settings, negotiate, options_for, push, raw_client, running_hub
from tests.jwks import AUDIENCE, ISSUER, public_jwk
from tests.local_server import serving

EXPIRED = {"type": 7, "error": "token expired", "allowReconnect": True}
REVOKED = {"type": 7, "error": "token revoked"}


def token_for(user: uuid.UUID, *, ttl: float = 300, now: float | None = None) -> str:
    return mint_token(SECRET, user, ttl=ttl, now=now)


async def test_connection_closes_at_exp_and_gets_nothing_after(pool, start_hub):
    async with start_hub() as hub:
        user = uuid.uuid4()
        # The hub's timer closes the connection at exp, with reconnect allowed.
        async with raw_client(hub, token_for(user, ttl=3)) as client:
            await push(hub, user_group(user), "before", {"n": 1})
            assert (await client.next_of([1]))["target"] == "before"
            assert await client.next_of([7], within=10) == EXPIRED
        await wait_until(lambda: not hub.hub.connections)

        # A late timer (the loop was busy) does not matter: the fan-out closes it first.
        exp = int(time.time()) + 3
        async with raw_client(hub, token_for(user, ttl=3, now=exp - 3)) as client:
            [connection] = hub.hub.connections.values()
            assert connection.identity.expires_at == exp
            assert connection.transport is Transport.WEBSOCKETS
            assert connection.protocol is JSON
            hub.hub.expiry.cancel()  # as if the timer were late
            await asyncio.sleep(exp - time.time() + 0.05)  # to just past exp (a wait, no bound)
            assert connection.closing is None  # nothing has closed it yet
            await push(hub, user_group(user), "after", {"n": 2})
            assert await client.next_of([1, 7]) == EXPIRED
        metric = hub.hub.metrics.disconnects.labels("token_expired")._value.get()
        assert metric == 2


async def test_revocation_cuts_the_user_on_every_replica(database_url, pool):
    settings = hub_settings()
    alice, bob = uuid.uuid4(), uuid.uuid4()
    old = token_for(alice)
    async with (
        running_hub(settings, dsn=database_url) as first,
        running_hub(settings, dsn=database_url) as second,
        raw_client(first, old) as on_first,
        raw_client(second, old) as on_second,
        raw_client(first, token_for(bob)) as bystander,
    ):
        api = create_api(pool=pool, options=ApiOptions(), verifier=second.hub.verifier)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=api), base_url="http://api"
        ) as rest:
            headers = {"Authorization": f"Bearer {old}"}
            assert (await rest.get("/api/chats", headers=headers)).status_code == 200

            revocation = await revocation_store.revoke(pool, alice)
            assert await on_first.next_of([1, 7]) == REVOKED
            assert await on_second.next_of([1, 7]) == REVOKED
            await push(first, user_group(bob), "still_here", {})
            assert (await bystander.next_of([1]))["target"] == "still_here"

            # Earlier tokens are refused from now on, on the hub and on REST.
            assert (await rest.get("/api/chats", headers=headers)).status_code == 401
            for hub in (first, second):
                assert (await negotiate(hub, old)).status_code == 401
                with pytest.raises(InvalidStatus) as refused:
                    async with raw_client(hub, old):
                        pass
                assert refused.value.response.status_code == 401
            # A token issued after the revocation is accepted.
            fresh = token_for(alice, now=revocation.revoked_at.timestamp() + 1)
            assert (await negotiate(first, fresh)).status_code == 200
            assert (await rest.get("/api/chats", headers=_bearer(fresh))).status_code == 200

            # Lifted: every replica accepts the earlier token again.
            assert await revocation_store.lift(pool, alice) is not None
            await wait_until(lambda: not first.hub.revocations and not second.hub.revocations)
            assert (await negotiate(second, old)).status_code == 200


async def test_a_replica_started_later_reads_the_revocations(database_url, pool):
    alice = uuid.uuid4()
    old = token_for(alice, now=time.time() - 5)
    revocation = await revocation_store.revoke(pool, alice)
    async with running_hub(hub_settings(), dsn=database_url) as hub:
        assert (await negotiate(hub, old)).status_code == 401
        fresh = token_for(alice, now=revocation.revoked_at.timestamp() + 1)
        async with raw_client(hub, fresh):
            assert len(hub.hub.connections) == 1


KILL_FEED = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'realtime-dispatch-hub-membership'
"""


async def test_a_revocation_made_while_the_listener_is_down_still_cuts(pool, start_hub):
    """The NOTIFY is lost while the hub's listening connection is down; the reload after it
    reconnects finds the revocation and cuts the user."""
    alice = uuid.uuid4()
    async with (
        start_hub() as hub,
        raw_client(hub, token_for(alice, now=time.time() - 5)) as client,
    ):
        assert await pool.fetchval(KILL_FEED) == 1
        await wait_until(lambda: not hub.hub.membership.ready.is_set())
        await revocation_store.revoke(pool, alice)  # most likely while it is away
        assert await client.next_of([1, 7], within=15) == REVOKED
        await wait_until(hub.hub.membership.ready.is_set)
        assert alice in hub.hub.revocations.users()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- an identity provider's tokens ---------------------------------------------------------------


@dataclasses.dataclass
class JwksServer:
    keys: list[dict[str, Any]]
    failing: bool = False
    url: str = ""


@contextlib.asynccontextmanager
async def jwks_server(*keys: dict[str, Any]) -> AsyncIterator[JwksServer]:
    state = JwksServer(list(keys))

    async def jwks(_request: Request) -> Response:
        if state.failing:
            return Response("down", status_code=503)
        return JSONResponse({"keys": state.keys})

    app = Starlette(routes=[Route("/jwks", jwks)])
    async with serving(app) as url:
        state.url = f"{url}/jwks"
        yield state


def idp_token(kid: str, key: Any, user: uuid.UUID, **claims: Any) -> str:
    now = int(time.time())
    payload = {"sub": str(user), "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300}
    payload.update(claims)
    algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": kid})


async def test_identity_provider_tokens_through_rotation_and_outage(database_url, pool):
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    alice = uuid.uuid4()
    async with jwks_server(public_jwk("rsa-1", rsa_key)) as idp:
        tokens = TokenOptions(
            jwks_url=idp.url, issuer=ISSUER, audience=AUDIENCE, jwks_min_refetch=0.0
        )
        options = options_for(hub_settings(), jwt_secret=None, tokens=tokens)
        async with running_hub(hub_settings(), dsn=database_url, options=options) as hub:
            assert (await negotiate(hub, idp_token("rsa-1", rsa_key, alice))).status_code == 200
            for token in (
                idp_token("rsa-1", rsa_key, alice, iss="https://other.example"),
                idp_token("rsa-1", rsa_key, alice, aud="other"),
                idp_token("rsa-1", rsa_key, alice, sub="alice@example.com"),
                idp_token(
                    "unknown", rsa.generate_private_key(public_exponent=65537, key_size=2048), alice
                ),
                token_for(alice),  # HS256: no secret on this hub
            ):
                assert (await negotiate(hub, token)).status_code == 401

            # Rotation: a new key appears, found by its kid.
            idp.keys = [public_jwk("rsa-1", rsa_key), public_jwk("ec-2", ec_key)]
            async with raw_client(hub, idp_token("ec-2", ec_key, alice)) as connected:
                # The provider goes down: the connected user stays, known keys still verify,
                # and a key never seen is "unavailable", not "unauthorized".
                idp.failing = True
                assert (await negotiate(hub, idp_token("rsa-1", rsa_key, alice))).status_code == 200
                stranger = idp_token("ec-3", ec.generate_private_key(ec.SECP256R1()), alice)
                assert (await negotiate(hub, stranger)).status_code == 503
                await push(hub, user_group(alice), "still_connected", {})
                assert (await connected.next_of([1]))["target"] == "still_connected"
