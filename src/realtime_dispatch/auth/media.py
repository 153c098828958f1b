"""Media join minting (pure): a Jitsi-style room token and TURN REST-API credentials, made by
the dispatcher at delivery for ``call_invited``, ``conference_invited`` and
``conference_started``. Nothing here is stored or logged; only the room name is persisted.

* Room token: HS256 JWT signed with the Jitsi app secret: ``iss`` = app id, ``aud`` =
  ``"jitsi"``, ``sub`` = the Jitsi domain, ``room`` = the room name, ``iat``/``nbf``/``exp``
  (``exp`` = now + ``token_ttl``), and ``context`` naming whom it was minted for.
* TURN: the TURN REST API convention (coturn ``use-auth-secret``): username
  ``"{expiry}:{subject}"``, credential ``base64(HMAC-SHA1(turn_secret, username))``.

The subject is the target user for a 1:1 call (``user:`` push) and the chat for a conference
(``chat:`` push, one payload for every member of the chat).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import jwt
from pydantic import SecretStr

from realtime_dispatch.contracts.media import IceServer, MediaJoin
from realtime_dispatch.values.keys import Key

JITSI_AUDIENCE = "jitsi"


@dataclass(frozen=True, slots=True)
class MediaOptions:
    """Secrets for minting media join tokens at delivery (never stored)."""

    jitsi_app_id: str = "realtime-dispatch"
    jitsi_app_secret: SecretStr | None = None
    jitsi_domain: str = "meet.local"
    turn_urls: tuple[str, ...] = ()
    turn_secret: SecretStr | None = None
    token_ttl: float = 120.0


def turn_credential(secret: str, username: str) -> str:
    """``base64(HMAC-SHA1(secret, username))``, as TURN servers check it."""
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def room_token(
    options: MediaOptions,
    secret: str,
    *,
    room_name: str,
    user_id: Key | None,
    chat_id: Key | None,
    now: int,
    expires: int,
) -> str:
    context: dict[str, object] = {}
    if user_id is not None:
        context["user"] = {"id": str(user_id)}
    if chat_id is not None:
        context["group"] = str(chat_id)
    claims: dict[str, object] = {
        "iss": options.jitsi_app_id,
        "aud": JITSI_AUDIENCE,
        "sub": options.jitsi_domain,
        "room": room_name,
        "iat": now,
        "nbf": now,
        "exp": expires,
        "context": context,
    }
    return jwt.encode(claims, secret, algorithm="HS256")


class MediaMinter:
    """Mints :class:`MediaJoin` values from :class:`MediaOptions`; ``clock`` is injectable."""

    def __init__(self, options: MediaOptions, *, clock: Callable[[], float] = time.time) -> None:
        self.options = options
        self._clock = clock

    @property
    def configured(self) -> bool:
        """Without a Jitsi app secret nothing can be minted: payloads go out without media."""
        return self.options.jitsi_app_secret is not None

    def mint(
        self, room_name: str, *, user_id: Key | None = None, chat_id: Key | None = None
    ) -> MediaJoin | None:
        secret = self.options.jitsi_app_secret
        if secret is None:
            return None
        now = int(self._clock())
        expires = now + max(1, int(self.options.token_ttl))
        token = room_token(
            self.options,
            secret.get_secret_value(),
            room_name=room_name,
            user_id=user_id,
            chat_id=chat_id,
            now=now,
            expires=expires,
        )
        ice: list[IceServer] = []
        turn_secret = self.options.turn_secret
        if turn_secret is not None and self.options.turn_urls:
            subject = user_id if user_id is not None else chat_id
            username = f"{expires}:{subject}"
            ice.append(
                IceServer(
                    urls=list(self.options.turn_urls),
                    username=username,
                    credential=turn_credential(turn_secret.get_secret_value(), username),
                )
            )
        return MediaJoin(
            room_name=room_name,
            access_token=token,
            expires_at=datetime.fromtimestamp(expires, UTC),
            ice_servers=ice,
        )
