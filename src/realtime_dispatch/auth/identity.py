"""Who a connection or request is: :class:`Identity`, the one definition the hub (every
transport), the REST API and the ops API share. :meth:`TokenVerifier.verify
<realtime_dispatch.auth.tokens.TokenVerifier.verify>` returns it; a hub connection carries it
(``HubConnection.identity``), beside how it talks (its transport and hub protocol), which belongs
to the connection, not to the token."""

from __future__ import annotations

from dataclasses import dataclass

from realtime_dispatch.values.keys import Key


@dataclass(frozen=True, slots=True)
class Identity:
    """A verified token's user and lifetime.

    ``expires_at`` and ``issued_at`` are the token's ``exp`` and ``iat`` (Unix seconds; ``iat``
    None when the token has none, which a revocation of the user refuses).
    """

    user_id: Key
    """The user's key, of ``REALTIME_KEY_TYPE`` (a ``UUID`` unless an owner's schema says
    otherwise)."""
    expires_at: float
    issued_at: float | None = None
    admin: bool = False

    def expired(self, now: float) -> bool:
        """True from the token's ``exp`` on (``now`` in Unix seconds)."""
        return now >= self.expires_at
