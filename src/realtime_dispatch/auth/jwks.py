"""An identity provider's signing keys: :class:`JwksKeys` fetches the JSON Web Key Set at
``REALTIME_HUB_JWT_JWKS_URL`` with httpx, caches it, and finds a key by ``kid``.

* Only RSA keys for RS256 and P-256 keys for ES256 are kept (never a symmetric ``oct`` key,
  which would let a token signed with public material pass as HS256), and only keys meant for
  signatures.
* A ``kid`` not in the cache means the provider rotated its keys: the set is fetched again, at
  most once per ``min_refetch`` seconds whatever the tokens ask for (a flood of made-up ``kid``
  values costs one fetch), and concurrent callers share one fetch.
* The cached set is refreshed on use after ``refresh_after`` seconds. A fetch that fails keeps
  the keys already known: tokens signed by them still verify, so an outage of the provider cuts
  nobody off. Only a token whose key was never fetched is refused then, with
  :class:`KeysUnavailable` (a 503, not a 401: the token may be fine).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import structlog

from realtime_dispatch.errors import TransientError

log = structlog.get_logger(__name__)

SIGNING_ALGORITHMS = frozenset({"RS256", "ES256"})
_KEY_TYPES = {"RS256": "RSA", "ES256": "EC"}
MAX_JWKS_BYTES = 1 << 20


class KeysUnavailable(TransientError):
    """The key set could not be fetched and the token's key is not cached (→ 503: try again
    later, the token may well be fine)."""

    code = "KeysUnavailable"


def parse_key_set(data: Any) -> dict[str, jwt.PyJWK]:
    """The usable signing keys of a JWKS document, by ``kid``; keys of other types, uses or
    algorithms, and keys without a ``kid``, are left out. Raises ValueError for a document that
    is not a key set."""
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError("not a JSON Web Key Set (no keys list)")
    keys: dict[str, jwt.PyJWK] = {}
    for entry in data["keys"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
            continue
        if entry.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        if key.algorithm_name not in SIGNING_ALGORITHMS:
            continue
        if key.key_type != _KEY_TYPES[key.algorithm_name]:
            continue
        keys[entry["kid"]] = key
    return keys


class JwksKeys:
    def __init__(
        self,
        url: str,
        *,
        refresh_after: float = 300.0,
        min_refetch: float = 30.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self._refresh_after = refresh_after
        self._min_refetch = min_refetch
        self._timeout = timeout
        self._clock = clock
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._failing = True
        """The last fetch failed, or none was made yet."""
        self._generation = 0
        self._lock = asyncio.Lock()
        self.fetches = 0
        """How many fetches were attempted (for tests and logs)."""

    async def key_for(self, kid: str) -> jwt.PyJWK:
        """The key named ``kid``, fetching the set when it is unknown or stale.

        Raises :class:`KeyError` for a ``kid`` the provider does not publish, and
        :class:`KeysUnavailable` when the set cannot be fetched and ``kid`` is not cached.
        """
        key = self._keys.get(kid)
        if key is not None and not self._stale():
            return key
        if self._may_fetch():
            await self._fetch_once()
        found = self._keys.get(kid)
        if found is not None:
            return found
        if self._failing:
            raise KeysUnavailable("the identity provider's keys could not be fetched")
        raise KeyError(kid)

    async def prefetch(self) -> None:
        """Fetch the set now (at start), so the first tokens need not wait; failure is logged."""
        await self._fetch_once()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _stale(self) -> bool:
        return self._fetched_at is None or self._clock() - self._fetched_at >= self._refresh_after

    def _may_fetch(self) -> bool:
        return self._attempted_at is None or self._clock() - self._attempted_at >= self._min_refetch

    async def _fetch_once(self) -> None:
        """One fetch for every caller waiting now: whoever takes the lock after a fetch was
        made since it arrived finds it done."""
        generation = self._generation
        async with self._lock:
            if self._generation != generation:
                return
            self._generation += 1
            self._attempted_at = self._clock()
            self.fetches += 1
            try:
                keys = await self._download()
            except (httpx.HTTPError, ValueError) as exc:
                self._failing = True
                log.warning(
                    "jwks_fetch_failed", error=type(exc).__name__, cached_keys=len(self._keys)
                )
                return
            self._failing = False
            self._keys = keys
            self._fetched_at = self._clock()
            log.info("jwks_fetched", keys=len(keys))

    async def _download(self) -> dict[str, jwt.PyJWK]:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self._timeout, transport=self._transport, follow_redirects=False
            )
        response = await self._client.get(self.url, headers={"Accept": "application/json"})
        response.raise_for_status()
        if len(response.content) > MAX_JWKS_BYTES:
            raise ValueError("key set too large")
        return parse_key_set(response.json())
