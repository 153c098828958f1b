"""Operator tools: the queries behind ``realtime-dispatch quarantined`` / ``lock`` / ``stats
--watch`` and the ``/ops`` page (live backlog and lag, quarantined rows, requeue, lock holder)."""
