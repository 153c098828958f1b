"""The wire: what a connection speaks and how it is cut into frames.

* :mod:`.protocol`: the JSON hub protocol's records (handshake, invocations, completions,
  acks, close) and their parsing;
* :mod:`.messagepack`: the MessagePack hub protocol, records converted from JSON;
* :mod:`.protocols`: :class:`~.protocols.HubProtocol` (the protocols a client may pick) and
  :class:`~.protocols.Transport` (what carries a connection);
* :mod:`.framing`: WebSocket frame headers, written once per record;
* :mod:`.signal_envelope`: the envelope of a live signal on the backplane;
* :mod:`.invocations`: a lone ``Typing`` invocation read without the general parse, and the
  void completion.

May import: nothing else of the hub (``realtime_dispatch.errors``, ``push``, ``keys`` only).
"""
