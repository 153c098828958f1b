"""SignalR-compatible hub ``/hubs/messenger``: negotiate, WebSocket JSON hub protocol, JWT auth,
groups with live membership, Redis backplane, stateful reconnect. See ``docs/hub.md``."""

from realtime_dispatch.hub.runtime import Hub, HubOptions
from realtime_dispatch.hub.serving.routes import hub_routes

__all__ = ["Hub", "HubOptions", "hub_routes"]
