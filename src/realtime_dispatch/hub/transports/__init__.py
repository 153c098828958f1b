"""Transports: what moves a connection's bytes between an HTTP request and its session.

* :mod:`.ws_direct`: the WebSocket served straight on the HTTP protocol (no ASGI), and
  :mod:`.ws_opening`, what its opening talks to until the connection is admitted;
* :mod:`.endpoint`: the WebSocket served through ASGI (Starlette), and what both share;
* :mod:`.sse`, :mod:`.longpolling`, :mod:`.http` and :mod:`.common`: Server-Sent Events and
  long polling; :mod:`.http_connections` holds their connections by token;
* :mod:`.negotiate`: ``/negotiate`` and the negotiations waiting for their connection;
* :mod:`.admission`: the opening of a connection every transport goes through;
* :mod:`.host`: :class:`~.host.TransportHost`, what they use of the hub that serves them.

May import: :mod:`realtime_dispatch.hub.signals` and everything below it. Never the
:class:`~realtime_dispatch.hub.Hub`, not even for annotations: a transport names a
:class:`~.host.TransportHost`, which the Hub satisfies.
"""
