"""Outbox rows → hub payloads: one projection query per kind group and batch, shaped into the
models of :mod:`realtime_dispatch.contracts` (see :mod:`.registry` for the shipped builders)."""
