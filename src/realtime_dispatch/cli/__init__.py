"""The command line (``realtime-dispatch serve``, ``worker``, ``hub``, ``migrate``, ``stats``, …):
reads the settings once and wires the services below it together. With ``settings``, the
composition root: the only package that imports both the pipeline and the reference messenger
(``realtime_dispatch.messenger``), handing the pipeline what it needs of the app."""
