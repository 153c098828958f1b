"""Live signals: typing and presence, which are not pushes from the outbox.

* :mod:`.typing_signal`: ``Typing(chatId)`` and ``user_typing``;
* :mod:`.presence` and :mod:`.presence_store`: ``WatchPresence`` / ``presence_changed``, and
  the replicas' presence claims in Redis;
* :mod:`.signal_backplane`: the relay of signals to the other replicas;
* :mod:`.methods`: the hub methods a client invokes;
* :mod:`.hub_signals`: puts them together for the :class:`~realtime_dispatch.hub.Hub`;
* :mod:`.wire_ids`: how user ids travel in these payloads.

May import: :mod:`realtime_dispatch.hub.backplane`, :mod:`realtime_dispatch.hub.membership`,
:mod:`realtime_dispatch.hub.metrics`, :mod:`realtime_dispatch.hub.connections`,
:mod:`realtime_dispatch.hub.wire`; never a transport.
"""
