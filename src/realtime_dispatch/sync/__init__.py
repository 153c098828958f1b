"""Resume without gaps: ``GET /api/sync``, the outbox read back as an offset log."""
