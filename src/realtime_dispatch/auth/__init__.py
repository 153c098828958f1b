"""Credentials, minted and verified in one place: hub/REST access tokens (HS256 or an identity
provider's JWKS) verified into an :class:`~.identity.Identity`, user revocations, and the media
join credentials handed out at delivery."""
