"""The REST API (FastAPI) of the reference owner service; see :func:`create_api`."""

from realtime_dispatch.messenger.api.app import create_api

__all__ = ["create_api"]
