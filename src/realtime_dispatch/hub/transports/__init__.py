"""Transports: what moves a connection's bytes between an HTTP request and its session.

* :mod:`.ws_direct`: the WebSocket served straight on the HTTP protocol (no ASGI), and
  :mod:`.ws_opening`, what its opening talks to until the connection is admitted;
* :mod:`.endpoint`: the WebSocket served through ASGI (Starlette), and what both share;
* :mod:`.sse`, :mod:`.longpolling`, :mod:`.http` and :mod:`.common`: Server-Sent Events and
  long polling; :mod:`.http_connections` holds their connections by token;
* :mod:`.negotiate`: ``/negotiate`` and the negotiations waiting for their connection;
* :mod:`.admission`: the opening of a connection every transport goes through.

May import: :mod:`realtime_dispatch.hub.signals` and everything below it; the
:class:`~realtime_dispatch.hub.Hub` for type annotations only.
"""
