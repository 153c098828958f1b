"""The reference messenger owner service: chats, messages, contacts, calls, conferences and
recordings, each command writing its domain change and its push intent in one transaction; its
REST API (``api``) and its tables (``migrations``)."""
