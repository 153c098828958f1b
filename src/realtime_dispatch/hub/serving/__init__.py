"""Serving: the HTTP server in front of the hub.

* :mod:`.http_protocol`: the guarded HTTP protocol (caps, timeouts, forwarded addresses);
* :mod:`.http_limits`, :mod:`.http_timer`, :mod:`.direct_post`: its limits and refusal
  responses, its one timer per connection, and a ``POST`` it answers itself;
* :mod:`.forwarded`: the trusted proxies and the ``Forwarded`` headers;
* :mod:`.routes`: the hub's routes (negotiate, WebSocket, SSE, long polling, health, metrics);
* :mod:`.push_api`: the push API other processes publish through;
* :mod:`.server` and :mod:`.app`: the hub on its own server, and its ASGI app.

May import: every other part of the hub (the top of it).
"""
