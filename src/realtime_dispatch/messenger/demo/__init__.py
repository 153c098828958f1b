"""The reference messenger's demo page at ``/``: pick a demo user, chat live with another, watch
dedupe and resync. Its files are served at ``/demo/static/…`` from ``static/``.

``demo_routes`` mounts the page, its static files and a small read API. The token endpoint
(``POST /demo/api/token``) exists only when ``serve`` runs on generated development secrets:
with a configured ``REALTIME_HUB_JWT_SECRET`` nobody can mint a token by asking for one.
"""

from realtime_dispatch.messenger.demo.routes import demo_routes
from realtime_dispatch.messenger.demo.users import DEMO_USERS, DemoUser

__all__ = ["DEMO_USERS", "DemoUser", "demo_routes"]
