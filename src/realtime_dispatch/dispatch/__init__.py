"""The dispatcher worker: claims due outbox rows, builds their payloads from the reference ids
(``projections``), pushes them through a :class:`~realtime_dispatch.delivery.push.HubPublisher` and
records each outcome (Done, retry with backoff, quarantine)."""
