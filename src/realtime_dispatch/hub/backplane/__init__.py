"""The backplane: how a push crosses replicas, and the publishers the dispatcher uses.

* :mod:`.publishers`: the in-process publisher and the Redis one (one channel);
* :mod:`.subscriber`: the Redis subscriber of one channel every replica reads;
* :mod:`.sharded` and :mod:`.sharded_publisher`: Redis Cluster, a sharded channel per group,
  subscribed by the replicas with members of it;
* :mod:`.resp`: RESP written and read on a connection of its own (hiredis's parser);
* :mod:`.choice`: which subscriber and publisher a hub runs, from its options.

May import: :mod:`realtime_dispatch.hub.membership`, :mod:`realtime_dispatch.hub.connections`,
:mod:`realtime_dispatch.hub.wire`; never a transport.
"""
