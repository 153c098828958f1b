"""The command line (``realtime-dispatch serve``, ``worker``, ``hub``, ``migrate``, ``stats``, …):
reads the settings once and wires the services below it together."""
