"""The wire format: one pydantic model per hub event payload (camelCase, ids as strings, times
ISO 8601 UTC), the published event → model map (:mod:`.events`) and the ``GET /api/sync`` page
(:mod:`.sync`). No database, no settings: the client SDK imports this package on its own.

One module belongs to the reference app rather than the pipeline: :mod:`.messenger_rest`, the
reference messenger's REST bodies, kept here so that the client SDKs ship them. No other module
of this package, nor of the pipeline, imports it."""
