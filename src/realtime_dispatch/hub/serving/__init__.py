"""Serving: the hub's routes and its own server, on the HTTP edge (:mod:`realtime_dispatch.edge`).

* :mod:`.routes`: the hub's routes (negotiate, WebSocket, SSE, long polling, health, metrics);
* :mod:`.push_api`: the push API other processes publish through;
* :mod:`.forward`: a worker's requests for another worker's connection, sent to that worker;
* :mod:`.server` and :mod:`.app`: the hub on its own server, and its ASGI app.

May import: every other part of the hub (the top of it), and the edge.
"""
