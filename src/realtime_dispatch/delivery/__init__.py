"""The delivery seam: what a dispatcher worker and a hub share, and nothing of either.

A worker hands pushes (:mod:`.push`: :class:`~.push.Push`, the publisher protocol
:class:`~.push.HubPublisher`, the HTTP push API's paths, limits and refusals) to a publisher,
with the membership marks (:mod:`.marks`) its claims heard, and wakes on the NOTIFY channels
(:mod:`.channels`) that the hubs listen to as well. Below the services (``dispatch``, ``hub``,
``messenger`` …), above :mod:`realtime_dispatch.values`; the wire contracts and the client SDK
never import it.
"""
