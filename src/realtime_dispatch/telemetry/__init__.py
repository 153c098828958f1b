"""What a process tells its operators: structured logs (:mod:`.logs`) and traces
(:mod:`.tracing`). Imports only :mod:`realtime_dispatch.errors` and third-party libraries."""
