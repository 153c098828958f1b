"""SignalR-compatible hub ``/hubs/messenger``: negotiate, WebSocket JSON hub protocol, JWT auth,
groups with live membership, Redis backplane, stateful reconnect. See ``docs/hub.md``."""

from realtime_dispatch.hub.routes import hub_routes
from realtime_dispatch.hub.runtime import Hub, HubOptions

__all__ = ["Hub", "HubOptions", "hub_routes"]
