"""Credentials, minted and verified in one place: hub/REST access tokens and the media join
credentials handed out at delivery."""
