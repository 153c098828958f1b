"""Who a connection or request is: :class:`Identity`, the one definition the hub (every
transport), the REST API and the ops API share. :meth:`TokenVerifier.verify
<realtime_dispatch.auth.tokens.TokenVerifier.verify>` returns it; a hub connection carries it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from uuid import UUID


@dataclass(frozen=True, slots=True)
class Identity:
    """A verified token's user and lifetime, plus how the connection carrying it talks.

    ``expires_at`` and ``issued_at`` are the token's ``exp`` and ``iat`` (Unix seconds; ``iat``
    None when the token has none, which a revocation of the user refuses). ``transport`` and
    ``protocol`` are None for a plain request; the hub fills them in once they are known
    (:meth:`on`), e.g. ``"WebSockets"`` and ``"json"``.
    """

    user_id: UUID
    expires_at: float
    issued_at: float | None = None
    admin: bool = False
    transport: str | None = None
    protocol: str | None = None

    def on(self, transport: str, protocol: str | None = None) -> Identity:
        """This identity on a hub connection of ``transport`` speaking ``protocol``."""
        return replace(self, transport=transport, protocol=protocol)

    def expired(self, now: float) -> bool:
        """True from the token's ``exp`` on (``now`` in Unix seconds)."""
        return now >= self.expires_at
