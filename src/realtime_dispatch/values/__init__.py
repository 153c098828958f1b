"""The plain values every layer passes around: ids (:mod:`.ids`), the owner's keys
(:mod:`.keys`) and JSON (:mod:`.json_types`). Imports only :mod:`realtime_dispatch.errors`
and third-party libraries; the wire contracts and the client SDK stand on it."""
