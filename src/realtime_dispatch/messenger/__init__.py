"""The reference app, not the pipeline: the messenger owner service (chats, messages, contacts,
calls, conferences and recordings), each command writing its domain change and its push intent
in one transaction; its REST API (``api``), scheduled jobs (``jobs``), tables (``migrations``)
and demo page (``demo``). Its REST bodies are :mod:`realtime_dispatch.contracts.messenger_rest`,
shipped with the wire models for the client SDKs.

It stands on the pipeline (``outbox``, ``auth``, ``contracts``, …); no pipeline package imports
it (the ``pipeline`` contract of ``pyproject.toml``): the command line wires the two together."""
