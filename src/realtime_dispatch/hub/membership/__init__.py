"""Membership: who is in which chat group, kept live from PostgreSQL.

* :mod:`.feed`: :class:`~.feed.MembershipFeed`, the ``LISTEN`` connection, its resync and the
  membership barrier;
* :mod:`.loads`: the initial groups of connections opening, one query per batch of them;
* :mod:`.hints`: the users a hint names read again, and what waits for those re-reads;
* :mod:`.tracker`: :class:`~.tracker.MembershipTracker`, applies membership changes to the
  group registry;
* :mod:`.ordering`: :class:`~.ordering.OrderedDelivery`, pushes fanned out after the membership
  changes before them (the barrier), the one delivery path of local and backplane pushes;
* :mod:`.revocation_watch`: token revocations heard on the feed's connection.

May import: :mod:`realtime_dispatch.hub.metrics`, :mod:`realtime_dispatch.hub.connections`,
:mod:`realtime_dispatch.hub.wire`.
"""
