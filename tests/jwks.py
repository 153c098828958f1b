"""The identity provider of the token tests: its issuer, audience and public keys as JWKs."""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://idp.example/realms/acme"


AUDIENCE = "realtime-dispatch"


def public_jwk(kid: str, key: Any) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    else:
        jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "use": "sig"}
