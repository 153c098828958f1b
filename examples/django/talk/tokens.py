"""The token a client connects to the hub with: HS256 under ``REALTIME_HUB_JWT_SECRET``, ``sub``
the Django user's integer id (a JSON number), ``exp`` required by the hub."""

from __future__ import annotations

import time

import jwt
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser


def hub_token(user: AbstractBaseUser) -> str:
    secret = settings.REALTIME_HUB_JWT_SECRET
    if not secret:
        raise RuntimeError("REALTIME_HUB_JWT_SECRET is not set")
    now = int(time.time())
    claims = {"sub": user.pk, "iat": now, "exp": now + settings.REALTIME_TOKEN_TTL}
    return jwt.encode(claims, secret, algorithm="HS256")
