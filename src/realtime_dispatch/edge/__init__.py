"""The process's HTTP edge: what guards every request before a route sees it, whichever routes
the process serves (the hub's, REST, ops, the demo).

* :mod:`.http_protocol`: the guarded HTTP protocol (caps, timeouts, forwarded addresses);
* :mod:`.http_limits`, :mod:`.http_timer`, :mod:`.pipelining`, :mod:`.direct_post`: its limits
  and refusal responses, its one timer per connection, its pipelined requests bounded, and a
  ``POST`` it answers itself;
* :mod:`.forwarded`: the trusted proxies and the ``Forwarded`` headers;
* :mod:`.http_refusals`: what the edge refuses, counted and logged;
* :mod:`.request_guard`: the ASGI middleware that checks credentials and bounds bodies before a
  body is read;
* :mod:`.gc_sweep`: a full collection after connections end.

May import: :mod:`realtime_dispatch.auth` and everything below it. The services above it (the
hub, messenger, ops, the demo) plug their own endpoints in; nothing here names them.
"""
