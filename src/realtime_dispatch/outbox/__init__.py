"""The transactional outbox ``messenger.realtime_outbox``: its table and migrations, the typed
intent owners enqueue in their own transaction, and the named queries that claim rows and record
outcomes."""
