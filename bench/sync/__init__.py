"""Sync and resume: a `GET /api/sync` page at scale, replaying attackers beside a victim, and
the rows a resume reads."""
