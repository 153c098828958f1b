"""Media join credentials on the wire: the ``media`` object of ``call_invited``,
``conference_invited`` and ``conference_started``, and of ``POST /api/calls/{id}/media``. They are
minted by :mod:`realtime_dispatch.auth.media`."""

from __future__ import annotations

from datetime import datetime

from realtime_dispatch.contracts.base import Contract


class IceServer(Contract):
    urls: list[str]
    username: str
    credential: str


class MediaJoin(Contract):
    room_name: str
    access_token: str
    expires_at: datetime
    ice_servers: list[IceServer]
