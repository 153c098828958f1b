"""Connections: what a connection is, whatever carries it.

* :mod:`.connection`: :class:`~.connection.HubConnection`, one client's connection (its
  identity, groups, close);
* :mod:`.session`: the protocol state machine of a connection (handshake, invocations, acks,
  stateful reconnect), transport-free;
* :mod:`.outbound`: the outbound buffer of a connection (what is unacknowledged, its bounds);
* :mod:`.registry`: :class:`~.registry.GroupRegistry`, connection ↔ groups, pure;
* :mod:`.caps`: admission by the per-user cap (reservations);
* :mod:`.expiry`: token expiry, one timer for every connection;
* :mod:`.lifetime`: :class:`~.lifetime.Lifetimes`, the hub's connections from registration to
  the end (revocation, expiry, idle timeout, resume window, shutdown);
* :mod:`.fanout`: :class:`~.fanout.Fanout`, the fan-out of serialised records to the members of
  groups (framed once, re-encoded once per protocol, one write per connection).

May import, of the hub: :mod:`realtime_dispatch.hub.wire` only (metrics are handed in as
``prometheus_client`` objects, the rest of the hub through hooks).
"""
