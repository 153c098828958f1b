"""The wire format: one pydantic model per hub event payload (camelCase, ids as strings, times
ISO 8601 UTC) and the published event → model map (:mod:`.events`). No database, no settings:
the client SDK imports this package on its own."""
