"""Media join minting, pure: Jitsi-style room token and TURN REST-API credentials."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime
from uuid import uuid4

import jwt
from pydantic import SecretStr

from realtime_dispatch.auth.media import MediaMinter, MediaOptions, turn_credential
from realtime_dispatch.dispatch.projections.registry import media_invite_kinds
from realtime_dispatch.dispatch.service import unminted_invites
from realtime_dispatch.manifest.manifest import Manifest, shipped_manifest

NOW = 1_700_000_000.0
OPTIONS = MediaOptions(
    jitsi_app_id="app",
    jitsi_app_secret=SecretStr("jitsi-secret-with-32-bytes-or-more!!"),
    jitsi_domain="meet.example",
    turn_urls=("turn:t.example:3478",),
    turn_secret=SecretStr("turn-secret"),
    token_ttl=120,
)


def test_room_token_and_turn_credentials_for_a_user() -> None:
    user = uuid4()
    join = MediaMinter(OPTIONS, clock=lambda: NOW).mint("call-abc", user_id=user)
    assert join is not None
    wire = join.wire()
    assert set(wire) == {"roomName", "accessToken", "expiresAt", "iceServers"}
    assert wire["expiresAt"] == datetime.fromtimestamp(NOW + 120, UTC).isoformat().replace(
        "+00:00", "Z"
    )
    claims = jwt.decode(
        join.access_token,
        "jitsi-secret-with-32-bytes-or-more!!",
        algorithms=["HS256"],
        audience="jitsi",
        options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
    )
    assert claims == {
        "iss": "app",
        "aud": "jitsi",
        "sub": "meet.example",
        "room": "call-abc",
        "iat": int(NOW),
        "nbf": int(NOW),
        "exp": int(NOW) + 120,
        "context": {"user": {"id": str(user)}},
    }
    [ice] = join.ice_servers
    assert ice.username == f"{int(NOW) + 120}:{user}"
    expected = hmac.new(b"turn-secret", ice.username.encode(), hashlib.sha1).digest()
    assert (
        ice.credential
        == base64.b64encode(expected).decode()
        == turn_credential("turn-secret", ice.username)
    )
    assert ice.urls == ["turn:t.example:3478"]


def test_conference_tokens_name_the_chat() -> None:
    chat = uuid4()
    join = MediaMinter(OPTIONS, clock=lambda: NOW).mint("conf-x", chat_id=chat)
    assert join is not None
    assert join.ice_servers[0].username.endswith(f":{chat}")
    claims = jwt.decode(
        join.access_token,
        options={"verify_signature": False},
    )
    assert claims["context"] == {"group": str(chat)}


def test_without_secrets_nothing_is_minted() -> None:
    assert MediaMinter(MediaOptions()).mint("room", user_id=uuid4()) is None
    no_turn = MediaOptions(jitsi_app_secret=SecretStr("s" * 32))
    join = MediaMinter(no_turn).mint("room", user_id=uuid4())
    assert join is not None
    assert join.ice_servers == []


def test_the_invite_kinds_delivered_follow_the_manifest() -> None:
    """The start line names only invite kinds the manifest lets the dispatcher deliver."""
    shipped = shipped_manifest()
    assert media_invite_kinds(shipped) == {"CallInvited", "ConferenceInvited", "ConferenceStarted"}
    without = {"calls", "conferences", "conference_participants"}
    chats_only = Manifest({k: v for k, v in shipped.queries.items() if k not in without})
    assert media_invite_kinds(chats_only) == frozenset()
    calls_only = Manifest({k: v for k, v in shipped.queries.items() if k != "conferences"})
    assert media_invite_kinds(calls_only) == {"CallInvited", "ConferenceInvited"}


def test_unminted_invites_only_without_a_jitsi_secret() -> None:
    secret = MediaOptions(jitsi_app_secret=SecretStr("s" * 32))
    assert unminted_invites(secret, None) == frozenset()
    assert unminted_invites(MediaOptions(), None) == media_invite_kinds()
