"""The hub's JSON protocol as its test and benchmark clients speak it (the record separator,
the handshake and its answer, a ping), the test tokens, and the line a client process reports
to its parent with."""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

import jwt

RS = "\x1e"
RS_BYTES = RS.encode()
HANDSHAKE = b'{"protocol":"json","version":1}' + RS_BYTES
HANDSHAKE_ANSWER = b"{}" + RS_BYTES
PING = b'{"type":6}' + RS_BYTES

SECRET = "test-hub-secret-with-at-least-32-bytes!"
SERVICE_KEY = "test-service-key"


def make_token(
    user: uuid.UUID | str, *, ttl: float = 300, secret: str = SECRET, **claims: Any
) -> str:
    """An HS256 access token for ``user`` (its ``sub``), valid for ``ttl`` seconds."""
    payload: dict[str, Any] = {"sub": str(user), "exp": int(time.time() + ttl), **claims}
    return jwt.encode(payload, secret, algorithm="HS256")


def emit(event: dict[str, Any]) -> None:
    """One JSON line on stdout, flushed: how a client process reports to the benchmark."""
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()
